/**
 * A thrown value as text: an Error's message, anything else as a string; one that cannot be made
 * a string (a getter or `toString` that throws) is named by its type.
 *
 * @example
 * ```ts
 * errorText(new Error('ECONNREFUSED')); // 'ECONNREFUSED'
 * ```
 */
export function errorText(error: unknown): string {
  try {
    return error instanceof Error ? String(error.message) : String(error);
  } catch {
    return Object.prototype.toString.call(error);
  }
}
