import { AsyncLocalStorage } from 'node:async_hooks';

/** What a method running under `@SingleFlight` can learn about its flight. */
export interface FlightContext {
  readonly cacheKey: string;
  /** Whether the method holds the cross-worker lock (false: fail-open or wait timeout). */
  readonly locked: boolean;
  /** Aborted, with the `LockLostEvent` as its reason, when the lock is lost while it runs. */
  readonly signal: AbortSignal;
  /** With `fencing: true` and the lock held: this holder's fencing number. */
  readonly fence: number | undefined;
}

const storage = new AsyncLocalStorage<FlightContext>();

/** The flight of the `@SingleFlight` method running now (through `await`s too), if any. */
export function currentFlight(): FlightContext | undefined {
  return storage.getStore();
}

export function runInFlight<T>(context: FlightContext, work: () => T): T {
  return storage.run(context, work);
}
