/** A plain decimal number of seconds: digits, then optionally a point and digits. */
const DECIMAL_SECONDS = /^\d+(?:\.\d+)?$/;

/** The most seconds whose milliseconds Redis can still add to the clock without overflow. */
const MAX_SECONDS = Math.floor(Number.MAX_SAFE_INTEGER / 1000);

/**
 * Reads a number of seconds: a positive decimal such as `60` or `0.5`. A string in that form
 * (`'30'`, as environment config delivers it) is read as the number it spells.
 * Anything else (0, negatives, NaN, Infinity, exponent forms like `1e3`, other types) gives
 * `undefined`, and so does a value too large to send as PX milliseconds (over about 285 000
 * years), which Redis would refuse on every call.
 *
 * @example
 * ```ts
 * parseSeconds('0.5'); // 0.5
 * parseSeconds(1e21); // undefined: String(1e21) is '1e+21'
 * ```
 */
export function parseSeconds(value: unknown): number | undefined {
  if (typeof value !== 'number' && typeof value !== 'string') return undefined;
  if (typeof value === 'number' && !Number.isFinite(value)) return undefined;
  if (!DECIMAL_SECONDS.test(String(value))) return undefined;
  const seconds = Number(value);
  return seconds > 0 && seconds <= MAX_SECONDS ? seconds : undefined;
}

/**
 * Seconds as Redis wants them for PX/PEXPIRE: whole milliseconds, never below 1.
 *
 * @example
 * ```ts
 * toMilliseconds(0.5); // 500
 * toMilliseconds(0.0001); // 1
 * ```
 */
export function toMilliseconds(seconds: number): number {
  return Math.max(1, Math.round(seconds * 1000));
}
