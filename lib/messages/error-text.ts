/**
 * `value` as text for a message: what `String()` makes of it, or, for a value that cannot be made
 * a string (no prototype, a throwing `toString`, a Proxy whose traps throw), its tag or its type.
 * Never throws.
 *
 * @example
 * ```ts
 * textOf(Object.create(null)); // '[object Object]'
 * ```
 */
export function textOf(value: unknown): string {
  try {
    return String(value);
  } catch {
    // below
  }
  try {
    return Object.prototype.toString.call(value);
  } catch {
    return `[${typeof value}]`;
  }
}

/**
 * A thrown value as text: an Error's message, anything else as {@link textOf} makes it. Never
 * throws, whatever was thrown (a getter, `toString` or Proxy trap that throws included).
 *
 * @example
 * ```ts
 * errorText(new Error('ECONNREFUSED')); // 'ECONNREFUSED'
 * ```
 */
export function errorText(error: unknown): string {
  try {
    if (error instanceof Error) return textOf(error.message);
  } catch {
    // a Proxy whose traps throw: named below
  }
  return textOf(error);
}

/**
 * `error` itself when it is an `Error`, else a new `Error` with its {@link errorText}. Never throws,
 * even for a Proxy whose traps throw.
 *
 * @example
 * ```ts
 * asError('ECONNRESET').message; // 'ECONNRESET'
 * ```
 */
export function asError(error: unknown): Error {
  try {
    if (error instanceof Error) return error;
  } catch {
    // a Proxy whose traps throw: wrapped below
  }
  return new Error(errorText(error));
}
