/**
 * Seconds, as a number or as a string spelling one (`'30'`, as environment variables and
 * `ConfigService` give them); either is checked when the options are.
 *
 * @example
 * ```ts
 * const ttl: SecondsOption = process.env.LOCK_TTL as `${number}`;
 * ```
 */
export type SecondsOption = number | `${number}`;

/**
 * Options `T` as resolved: each of its seconds a number.
 *
 * @example
 * ```ts
 * const resolved: SecondsResolved<{ ttl?: SecondsOption }> = { ttl: 30 };
 * ```
 */
export type SecondsResolved<T> = {
  [K in keyof T]: T[K] extends SecondsOption | undefined ? Exclude<T[K], `${number}`> : T[K];
};

const DECIMAL_SECONDS = /^\d+(?:\.\d+)?$/;

// The most seconds whose milliseconds Redis can still add to its clock: more is refused on every call.
const MAX_SECONDS = Math.floor(Number.MAX_SAFE_INTEGER / 1000);

/**
 * A positive decimal number of seconds, or a string spelling one (`'30'`, as environment config
 * delivers it); anything else (0, exponent forms, NaN, other types) is `undefined`.
 */
export function parseSeconds(value: unknown, max: number = MAX_SECONDS): number | undefined {
  if (typeof value !== 'number' && typeof value !== 'string') return undefined;
  if (!DECIMAL_SECONDS.test(String(value))) return undefined;
  const seconds = Number(value);
  return seconds > 0 && seconds <= max ? seconds : undefined;
}

// Node runs a timer set past 2^31 − 1 ms after 1 ms. A lock's ttl, wait and hold are each timed
// by one (the watchdog, the waiter's deadline), so they stay below it; other waits are clamped.
const TIMER_MAX_MS = 2 ** 31 - 1;
export const TIMER_SECONDS = Math.floor(TIMER_MAX_MS / 1000);

/** `ms` as a timer can wait it. */
export const timerMs = (ms: number): number => Math.min(Math.max(0, ms), TIMER_MAX_MS);

/** `work`'s outcome, or `late()`'s (its value, or what it throws) once `seconds` have passed. */
export function within<T>(work: PromiseLike<T>, seconds: number, late: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<T>((resolve) => {
    // A promise of `late()`: one that throws rejects the race. Unref'd: `work` keeps the process.
    timer = setTimeout(() => resolve(Promise.resolve().then(late)), timerMs(seconds * 1000));
    timer.unref();
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/** Whole milliseconds for PX/PEXPIRE, never below 1. */
export function toMilliseconds(seconds: number): number {
  return Math.max(1, Math.round(seconds * 1000));
}
