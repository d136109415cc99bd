// The event shapes every layer shares: the breaker's state, a lost lock, the engine's and the
// cache's events.

/**
 * The breaker's state: `closed` (use Redis), `open` (skip Redis until the cool-down is over),
 * `half-open` (one probe call may use Redis; its outcome closes or re-opens the breaker).
 *
 * @example
 * ```ts
 * const state: CircuitState = breaker.state;
 * ```
 */
export type CircuitState = 'closed' | 'open' | 'half-open';

/**
 * Why the watchdog gave the lock up: `'lost'` an extension found the lock gone or held by another
 * token; `'unreachable'` Redis could not be asked for a whole TTL, so the lock has expired by now;
 * `'maxHold'` the cap on the total hold time was reached.
 *
 * @example
 * ```ts
 * const reason: LockLostReason = 'maxHold';
 * ```
 */
export type LockLostReason = 'lost' | 'unreachable' | 'maxHold';

/**
 * The `'lockLost'` event: which lock, why, and the extension error when Redis was unreachable.
 *
 * @example
 * ```ts
 * watchdog.on('lockLost', (event: LockLostEvent) => logger.warn(`${event.key}: ${event.reason}`));
 * ```
 */
export interface LockLostEvent {
  readonly key: string;
  readonly reason: LockLostReason;
  readonly error?: Error;
}

/**
 * The engine's `'lockLost'` event: which lock, why, and the cache key of the call.
 *
 * @example
 * ```ts
 * engine.on('lockLost', (event: FlightLockLostEvent) => metrics.increment(event.reason));
 * ```
 */
export interface FlightLockLostEvent extends LockLostEvent {
  readonly cacheKey: string;
}

/**
 * The events a {@link SingleFlightEngine} emits.
 *
 * @example
 * ```ts
 * engine.on('breaker', (state: CircuitState) => console.log('breaker', state));
 * ```
 */
export interface SingleFlightEvents {
  /** A running call's lock was lost; its `SingleFlight.signal()` is aborted too. */
  lockLost: [FlightLockLostEvent];
  /** The circuit breaker changed state. */
  breaker: [state: CircuitState, previous: CircuitState];
}

/**
 * The events of a {@link BufferCache}, each with the cache key.
 *
 * @example
 * ```ts
 * cache.on('stale', (key) => metrics.increment('cache.stale'));
 * ```
 */
export interface BufferCacheEvents {
  /** A fresh entry was served: one store read, no lock. */
  hit: [key: string];
  /** No entry: the call joins or starts the build. */
  miss: [key: string];
  /** A stale entry (past `ttl`, within `grace`) was served. */
  stale: [key: string];
  /** This process refreshes a stale entry (no other worker does at the same time). */
  refresh: [key: string];
  /** A refresh failed; the stale entry is served until the next try, after a back-off. */
  'refresh-failed': [key: string, error: unknown];
  /** This process built an entry and stored it. */
  built: [key: string];
  /** A waiter took the entry another worker built, without building. */
  shared: [key: string];
}
