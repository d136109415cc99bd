// Texts from whatever was thrown. None of these throws, not even for a value whose getters,
// toString or Proxy traps throw.

/** `read()`, or `fallback` when it throws. */
export const attempt = <T>(read: () => T, fallback: T): T => {
  try {
    return read();
  } catch {
    return fallback;
  }
};

export function textOf(value: unknown): string {
  try {
    return String(value);
  } catch {
    return attempt(() => Object.prototype.toString.call(value), `[${typeof value}]`);
  }
}

/** An Error's message, anything else as text. */
export const errorText = (error: unknown): string =>
  textOf(attempt(() => (error instanceof Error ? error.message : error), error));

export const asError = (error: unknown): Error =>
  attempt(() => error instanceof Error, false) ? (error as Error) : new Error(errorText(error));
