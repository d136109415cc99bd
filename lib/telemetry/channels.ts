import diagnostics, { type Channel, type TracingChannel } from 'node:diagnostics_channel';
import type { CircuitState } from '../types/events.js';
import type { FlightLockLostEvent } from '../types/events.js';

/**
 * The library's `node:diagnostics_channel` channels: what it tells subscribers, and nothing it
 * builds while nobody listens. Each tracing channel publishes the tracing events of Node's
 * `TracingChannel` (`tracing:<name>:start`, `end`, `asyncStart`, `asyncEnd`, `error`) with one
 * context object per operation. The fields that describe how the operation went (role, times,
 * outcome) are set by the time of `asyncStart`; `start` has the key's hash only.
 *
 * @example
 * ```ts
 * import diagnostics from 'node:diagnostics_channel';
 * diagnostics.tracingChannel('nestjs-buffer-lock:flight').subscribe({
 *   start() {},
 *   end() {},
 *   asyncStart() {},
 *   asyncEnd(context) {
 *     console.log(context.keyHash, context.role, context.waitMs, context.holdMs, context.outcome);
 *   },
 *   error() {},
 * });
 * ```
 */
export const CHANNEL_NAMES = {
  /**
   * One `@SingleFlight` call, `SingleFlightEngine.run`, or subscription of `runObservable`: a
   * {@link FlightTrace}.
   */
  flight: 'nestjs-buffer-lock:flight',
  /** One `RedisLockService` acquire, release or extend: a {@link LockTrace}. */
  lock: 'nestjs-buffer-lock:lock',
  /** One `BufferCache` lookup (`getOrSet`, `@Cached`, the interceptor) or refresh: a {@link CacheTrace}. */
  cache: 'nestjs-buffer-lock:cache',
  /** A plain channel: a running call's lock was lost, a {@link LockLostMessage}. */
  lockLost: 'nestjs-buffer-lock:lock-lost',
  /** A plain channel: the circuit breaker changed state, a {@link BreakerMessage}. */
  breaker: 'nestjs-buffer-lock:breaker',
} as const;

/**
 * How an operation ended: `'ok'`, `'error'` (see `error`), or `'skipped'` (nothing was run).
 *
 * @example
 * ```ts
 * const outcome: TraceOutcome = 'skipped'; // a call that found the key busy and ran nothing
 * ```
 */
export type TraceOutcome = 'ok' | 'error' | 'skipped';

/**
 * The context of one flight (`nestjs-buffer-lock:flight`).
 *
 * @example
 * ```ts
 * const line = (t: FlightTrace): string => `${t.keyHash} ${t.role} ${t.waitMs} ms ${t.outcome}`;
 * ```
 */
export interface FlightTrace {
  /** The hex MD5 of the cache key: the last part of the lock's Redis key. */
  readonly keyHash: string;
  /** The cache key itself, only with the module option `traceKeys: true`. */
  readonly key?: string;
  /**
   * `'leader'`: this call ran the work (holding the lock, or without it: see `locked`);
   * `'waiter'`: it joined a flight of the same key in progress in this process and got its
   * outcome; `'shared'`: it took the result another process's leader shared (`share: true`).
   * A `'skip'` call that found the key busy is a `'waiter'` with outcome `'skipped'`.
   */
  role?: 'leader' | 'waiter' | 'shared';
  /** Whether the work ran holding the cross-worker lock (leaders only). */
  locked?: boolean;
  /** Why a leader ran without the lock: Redis trouble, the breaker open, or `lockTimeout`. */
  unlockedReason?: 'redis-error' | 'breaker-open' | 'timeout';
  /** Milliseconds from the call to its admission (a waiter: to the outcome it joined). */
  waitMs?: number;
  /**
   * Milliseconds the lock was held (leaders): from admission until it was released, or, for an
   * Observable flight, until this subscription ended.
   */
  holdMs?: number;
  /** How the call ended. */
  outcome?: TraceOutcome;
  /** The call's value (set by the tracing channel). */
  result?: unknown;
  /** The call's error (set by the tracing channel on `error`). */
  error?: unknown;
}

/**
 * The context of one lock operation (`nestjs-buffer-lock:lock`).
 *
 * @example
 * ```ts
 * const busy = (t: LockTrace): boolean => t.operation === 'acquire' && t.outcome === 'busy';
 * ```
 */
export interface LockTrace {
  readonly operation: 'acquire' | 'release' | 'extend';
  /** The hex MD5 of the cache key: the last part of the lock's Redis key. */
  readonly keyHash: string;
  /**
   * `'acquired'`, `'busy'` (another holder has it), `'released'`, `'extended'`, `'lost'` (an
   * extend found the lock gone) or `'failed'` (Redis trouble or bad input: see `error`).
   */
  outcome?: 'acquired' | 'busy' | 'released' | 'extended' | 'lost' | 'failed';
  /** Milliseconds the operation took (one Redis round trip, or the connection first). */
  durationMs?: number;
  /** On release: milliseconds since this process acquired the lock, when it was traced then. */
  holdMs?: number;
  /** The operation's `[guard | ok, error]` tuple (set by the tracing channel). */
  result?: unknown;
  /** The `LockError` of a failed operation. */
  error?: unknown;
}

/**
 * The context of one cache lookup or refresh (`nestjs-buffer-lock:cache`).
 *
 * @example
 * ```ts
 * const missed = (t: CacheTrace): boolean => t.role === 'miss';
 * ```
 */
export interface CacheTrace {
  /** The hex MD5 of the cache key: the last part of the lock's Redis key. */
  readonly keyHash: string;
  /** The cache key itself, only with the module option `traceKeys: true`. */
  readonly key?: string;
  /**
   * `'hit'` (a fresh entry), `'miss'` (none: built, or taken from the worker that built it),
   * `'stale'` (served past `ttl`, within `grace`), or `'refresh'` (the background rebuild a stale
   * lookup started: its own operation).
   */
  role?: 'hit' | 'miss' | 'stale' | 'refresh';
  /** Misses and refreshes: whether this process ran the factory (`false`: another built it). */
  built?: boolean;
  /** Misses and refreshes: milliseconds from the lookup to the lock (or the entry shared). */
  waitMs?: number;
  /** Misses and refreshes that held the lock: milliseconds until it was released. */
  holdMs?: number;
  /** How it ended; `'skipped'`: a refresh left to the worker that refreshes already. */
  outcome?: TraceOutcome;
  /** The lookup's value (set by the tracing channel). */
  result?: unknown;
  /** The lookup's error (set by the tracing channel on `error`). */
  error?: unknown;
}

/**
 * What `nestjs-buffer-lock:lock-lost` carries: the engine's `'lockLost'` event, the raw cache key
 * replaced by its hash unless `traceKeys` is on.
 *
 * @example
 * ```ts
 * diagnostics.subscribe('nestjs-buffer-lock:lock-lost', (m) => console.warn((m as LockLostMessage).reason));
 * ```
 */
export interface LockLostMessage {
  readonly keyHash: string;
  readonly key?: string;
  readonly reason: FlightLockLostEvent['reason'];
}

/**
 * What `nestjs-buffer-lock:breaker` carries: a circuit breaker's move.
 *
 * @example
 * ```ts
 * diagnostics.subscribe('nestjs-buffer-lock:breaker', (m) => console.log((m as BreakerMessage).state));
 * ```
 */
export interface BreakerMessage {
  readonly state: CircuitState;
  readonly previous: CircuitState;
}

/**
 * The flight tracing channel.
 *
 * @example
 * ```ts
 * flightChannel.subscribe({
 *   start() {},
 *   end() {},
 *   asyncStart() {},
 *   asyncEnd: (t) => console.log(t.keyHash, t.role, t.waitMs),
 *   error() {},
 * });
 * ```
 */
export const flightChannel: TracingChannel<unknown, FlightTrace> = diagnostics.tracingChannel(
  CHANNEL_NAMES.flight,
);
/**
 * The lock tracing channel.
 *
 * @example
 * ```ts
 * if (lockChannel.hasSubscribers) {
 *   return traceLock('acquire', redisKey, undefined, () => this.take(redisKey, ttl));
 * }
 * ```
 */
export const lockChannel: TracingChannel<unknown, LockTrace> = diagnostics.tracingChannel(
  CHANNEL_NAMES.lock,
);
/**
 * The cache tracing channel.
 *
 * @example
 * ```ts
 * return traced(cacheChannel, trace, () => this.lookup(key, lockKey, factory, settings, trace));
 * ```
 */
export const cacheChannel: TracingChannel<unknown, CacheTrace> = diagnostics.tracingChannel(
  CHANNEL_NAMES.cache,
);
/**
 * The lost-lock channel.
 *
 * @example
 * ```ts
 * if (lockLostChannel.hasSubscribers) lockLostChannel.publish(lockLostMessage(event, false));
 * ```
 */
export const lockLostChannel: Channel = diagnostics.channel(CHANNEL_NAMES.lockLost);
/**
 * The breaker channel.
 *
 * @example
 * ```ts
 * breakerChannel.subscribe((m) => console.log((m as BreakerMessage).state));
 * ```
 */
export const breakerChannel: Channel = diagnostics.channel(CHANNEL_NAMES.breaker);

/**
 * The hex MD5 part of a lock's Redis key (its last 32 characters, whatever comes before).
 *
 * @example
 * ```ts
 * keyHashOf('buffer:lock:9a0364b9e99bb480dd25e1f0284c8555'); // '9a0364b9e99bb480dd25e1f0284c8555'
 * ```
 */
export const keyHashOf = (redisKey: string): string => redisKey.slice(-32);

/**
 * Milliseconds now, for the durations of the traces (monotonic).
 *
 * @example
 * ```ts
 * const started = nowMs();
 * context.durationMs = nowMs() - started;
 * ```
 */
export const nowMs = (): number => performance.now();

/**
 * Runs `run` as one traced operation of `channel`: start, end, then asyncStart and asyncEnd once
 * it settles (error before them when it rejects). Its outcome is `'ok'` or `'error'` unless the
 * operation set one.
 *
 * @example
 * ```ts
 * const value = await traced(flightChannel, { keyHash: keyHashOf(redisKey) }, () => build());
 * ```
 */
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
