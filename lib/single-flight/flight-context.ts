import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * What a method running under `@SingleFlight` (or `SingleFlightEngine.run`) can learn about its
 * flight: read it with {@link currentFlight}, or with `SingleFlight.signal()` and
 * `SingleFlight.fence()` inside the method.
 *
 * @example
 * ```ts
 * const flight: FlightContext | undefined = currentFlight();
 * if (flight?.locked) await db.write(row, { fence: flight.fence, signal: flight.signal });
 * ```
 */
export interface FlightContext {
  /** The cache key of the call. */
  readonly cacheKey: string;
  /** Whether the method runs holding the cross-worker lock (false: fail-open or wait timeout). */
  readonly locked: boolean;
  /**
   * Aborted, with the `LockLostEvent` as its reason, when the lock is lost while the method runs
   * (an extension found it gone, Redis unreachable for a whole TTL, or `maxHold` reached).
   */
  readonly signal: AbortSignal;
  /** With `fencing: true` and the lock held: this holder's fencing number. */
  readonly fence: number | undefined;
}

const storage = new AsyncLocalStorage<FlightContext>();

/**
 * The flight of the `@SingleFlight` method that is running now (through `await`s too), or
 * `undefined` outside one.
 *
 * @example
 * ```ts
 * const signal = currentFlight()?.signal;
 * await fetch(url, { signal });
 * ```
 */
export function currentFlight(): FlightContext | undefined {
  return storage.getStore();
}

/**
 * Runs `work` with `context` as its {@link currentFlight}.
 *
 * @example
 * ```ts
 * const context: FlightContext = { cacheKey: 'report:1', locked: true, signal, fence: undefined };
 * const report = await runInFlight(context, () => buildReport(1)); // currentFlight() is `context`
 * ```
 */
export function runInFlight<T>(context: FlightContext, work: () => T): T {
  return storage.run(context, work);
}
