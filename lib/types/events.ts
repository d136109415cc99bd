// The public event shapes spell their unions inline; the internal aliases are derived from them.

/**
 * The events of a `SingleFlightEngine`.
 *
 * @example
 * ```ts
 * engine.on('lockLost', (event) => metrics.increment(`lock_lost.${event.reason}`));
 * ```
 */
export interface SingleFlightEvents {
  /** A running call's lock was lost; its `SingleFlight.signal()` is aborted too. */
  lockLost: [event: FlightLockLostEvent];
  /** The circuit breaker changed state. */
  breaker: [state: 'closed' | 'open' | 'half-open', previous: 'closed' | 'open' | 'half-open'];
}

/**
 * A lost lock: `'lost'` an extension found it gone or taken, `'unreachable'` Redis could not be
 * asked for a whole TTL, `'maxHold'` the hold cap was reached. `error`: the extension's error.
 *
 * @example
 * ```ts
 * const onLockLost = (event: FlightLockLostEvent): void => console.warn(event.cacheKey, event.reason);
 * ```
 */
export interface FlightLockLostEvent {
  readonly key: string;
  readonly cacheKey: string;
  readonly reason: 'lost' | 'unreachable' | 'maxHold';
  readonly error?: Error;
}

/**
 * The events of a `BufferCache`, each with the cache key.
 *
 * @example
 * ```ts
 * cache.on('stale', (key) => metrics.increment('cache.stale'));
 * ```
 */
export interface BufferCacheEvents {
  hit: [key: string];
  miss: [key: string];
  stale: [key: string];
  /**
   * This process refreshes a stale entry; on failure it serves it stale until the next try.
   * `refresh-failed` is also a rebuild that failed past `grace`, whose entry `staleIfError` serves.
   */
  refresh: [key: string];
  'refresh-failed': [key: string, error: unknown];
  /** This process built an entry and stored it; `shared`: a waiter took another's. */
  built: [key: string];
  shared: [key: string];
}

export type CircuitState = SingleFlightEvents['breaker'][0];
export type LockLostReason = FlightLockLostEvent['reason'];
export type LockLostEvent = Omit<FlightLockLostEvent, 'cacheKey'>;
