// Texts for messages from whatever was thrown. None of these throws, not even for a value whose
// getters, toString or Proxy traps throw.

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

/** An Error's message, anything else as text. */
export function errorText(error: unknown): string {
  try {
    if (error instanceof Error) return textOf(error.message);
  } catch {
    // a Proxy whose traps throw: named below
  }
  return textOf(error);
}

export function asError(error: unknown): Error {
  try {
    if (error instanceof Error) return error;
  } catch {
    // a Proxy whose traps throw: wrapped below
  }
  return new Error(errorText(error));
}
