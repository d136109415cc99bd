import diagnostics, { type Channel, type TracingChannel } from 'node:diagnostics_channel';

/**
 * The library's `node:diagnostics_channel` names. `flight`, `lock` and `cache` are tracing
 * channels (`tracing:<name>:start`, `end`, `asyncStart`, `asyncEnd`, `error`) with one context
 * per operation, complete by `asyncStart` (`start` has the key's hash only); `lockLost` and
 * `breaker` are plain channels. Nothing is built while nobody listens.
 *
 * @example
 * ```ts
 * diagnostics.tracingChannel(CHANNEL_NAMES.flight).subscribe({
 *   asyncEnd: (t) => console.log(t.keyHash, t.role, t.waitMs, t.outcome),
 * });
 * ```
 */
export const CHANNEL_NAMES = {
  flight: 'nestjs-buffer-lock:flight',
  lock: 'nestjs-buffer-lock:lock',
  cache: 'nestjs-buffer-lock:cache',
  lockLost: 'nestjs-buffer-lock:lock-lost',
  breaker: 'nestjs-buffer-lock:breaker',
} as const;

/** How an operation ended; `'skipped'`: nothing was run. */
export type TraceOutcome = 'ok' | 'error' | 'skipped';

/**
 * One `@SingleFlight` call, `SingleFlightEngine.run`, or `runObservable` subscription. `keyHash`
 * (in every trace) is the hex MD5 of the cache key; `key` is set only with `traceKeys: true`.
 */
export interface FlightTrace {
  readonly keyHash: string;
  readonly key?: string;
  /** `'waiter'`: joined a flight of this process; `'shared'`: took another process's result. */
  role?: 'leader' | 'waiter' | 'shared';
  /** Leaders: whether the work ran holding the cross-worker lock. */
  locked?: boolean;
  unlockedReason?: 'redis-error' | 'breaker-open' | 'timeout';
  /** From the call to its admission (a waiter: to the outcome it joined). */
  waitMs?: number;
  /** Leaders: from admission to the release (an Observable: to the subscription's end). */
  holdMs?: number;
  outcome?: TraceOutcome;
  result?: unknown;
  error?: unknown;
}

/** One `RedisLockService` acquire, release or extend; `result` is the operation's tuple. */
export interface LockTrace {
  readonly operation: 'acquire' | 'release' | 'extend';
  readonly keyHash: string;
  /** `'lost'`: an extend found the lock gone; `'failed'`: Redis trouble or bad input. */
  outcome?: 'acquired' | 'busy' | 'released' | 'extended' | 'lost' | 'failed';
  durationMs?: number;
  /** On release: since this process acquired the lock, when that acquire was traced. */
  holdMs?: number;
  result?: unknown;
  error?: unknown;
}

/** One `BufferCache` lookup (`getOrSet`, `@Cached`, the interceptor) or background refresh. */
export interface CacheTrace {
  readonly keyHash: string;
  readonly key?: string;
  /**
   * `'stale'`: served past `ttl`, within `grace` (or past it, its rebuild failed: `staleIfError`);
   * `'refresh'`: the rebuild it started.
   */
  role?: 'hit' | 'miss' | 'stale' | 'refresh';
  /** Misses and refreshes: whether this process ran the factory. */
  built?: boolean;
  waitMs?: number;
  holdMs?: number;
  /** `'skipped'`: a refresh left to the worker refreshing already. */
  outcome?: TraceOutcome;
  result?: unknown;
  error?: unknown;
}

/** What `lockLost` carries: the engine's `'lockLost'` event, the key hashed unless `traceKeys`. */
export interface LockLostMessage {
  readonly keyHash: string;
  readonly key?: string;
  readonly reason: 'lost' | 'unreachable' | 'maxHold';
}

/** What `breaker` carries: a circuit breaker's move. */
export interface BreakerMessage {
  readonly state: 'closed' | 'open' | 'half-open';
  readonly previous: 'closed' | 'open' | 'half-open';
}

const tracing = <C extends object>(name: string): TracingChannel<unknown, C> =>
  diagnostics.tracingChannel(name);
export const flightChannel = tracing<FlightTrace>(CHANNEL_NAMES.flight);
export const lockChannel = tracing<LockTrace>(CHANNEL_NAMES.lock);
export const cacheChannel = tracing<CacheTrace>(CHANNEL_NAMES.cache);
export const lockLostChannel: Channel = diagnostics.channel(CHANNEL_NAMES.lockLost);
export const breakerChannel: Channel = diagnostics.channel(CHANNEL_NAMES.breaker);

/** The hex MD5 that ends every lock key. */
export const keyHashOf = (redisKey: string): string => redisKey.slice(-32);

/** Monotonic milliseconds, for the traces' durations. */
export const nowMs = (): number => performance.now();

/** Runs `run` as one traced operation; its outcome is `'ok'` or `'error'` unless it set one. */
export function traced<C extends { outcome?: unknown; error?: unknown }, T>(
  channel: TracingChannel<unknown, C>,
  context: C,
  run: () => Promise<T>,
): Promise<T> {
  return channel.tracePromise(async () => {
    try {
      const value = await run();
      context.outcome ??= 'ok';
      return value;
    } catch (error) {
      context.outcome = 'error';
      throw error;
    }
  }, context);
}
