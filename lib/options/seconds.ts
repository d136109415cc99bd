const DECIMAL_SECONDS = /^\d+(?:\.\d+)?$/;

// The most seconds whose milliseconds Redis can still add to its clock: more is refused on every call.
const MAX_SECONDS = Math.floor(Number.MAX_SAFE_INTEGER / 1000);

/**
 * A positive decimal number of seconds, or a string spelling one (`'30'`, as environment config
 * delivers it); anything else (0, exponent forms, NaN, other types) is `undefined`.
 */
export function parseSeconds(value: unknown): number | undefined {
  if (typeof value !== 'number' && typeof value !== 'string') return undefined;
  if (!DECIMAL_SECONDS.test(String(value))) return undefined;
  const seconds = Number(value);
  return seconds > 0 && seconds <= MAX_SECONDS ? seconds : undefined;
}

/** Whole milliseconds for PX/PEXPIRE, never below 1. */
export function toMilliseconds(seconds: number): number {
  return Math.max(1, Math.round(seconds * 1000));
}
