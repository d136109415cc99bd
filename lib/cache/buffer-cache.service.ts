import type { BufferCacheEvents } from '../types/events.js';
import { EventEmitter } from 'node:events';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import {
  resolveFlightOptions,
  type BufferLockOptions,
  type FlightOptions,
} from '../options/buffer-lock.options.js';
import { JSON_RESULT_SERIALIZER } from '../serialization/result-serializer.js';
import { LocalFlights } from '../single-flight/local-flights.js';
import { SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import { ThrottledLog } from '../single-flight/throttled-log.js';
import { CallSettings } from './call-settings.js';
import type { BufferCacheOptions, CacheSettings } from '../options/cache.options.js';
import { cacheTraceOf } from './cache-trace.js';
import { EntryStore } from './entry-store.js';
import { EntryBuilder, type Built } from './entry-builder.js';
import { StaleRefresh } from './stale-refresh.js';
import { withinMs } from './within-ms.js';
import { toMilliseconds } from '../options/seconds.js';
import { LockError } from '../errors/lock.error.js';
import { cacheChannel, nowMs, traced, type CacheTrace } from '../telemetry/channels.js';

/**
 * The outcome of one lookup: the value and how it was had (the interceptor's `X-Cache`).
 *
 * @example
 * ```ts
 * const lookup: CacheLookup<Report> = await cache[LOOKUP]('report:1', () => buildReport(1));
 * if (lookup.status === 'stale') metrics.increment('cache.stale');
 * ```
 */
export interface CacheLookup<T> {
  readonly value: T;
  readonly status: 'hit' | 'miss' | 'stale';
}

/**
 * The lookup with its status, for the library's own layers (the interceptor).
 *
 * @example
 * ```ts
 * const { value, status } = await cache[LOOKUP]('report:1', () => buildReport(1), { ttl: 30 });
 * ```
 */
export const LOOKUP: unique symbol = Symbol('lookup');

/**
 * What a {@link BufferCache} is made of, for use without Nest.
 *
 * @example
 * ```ts
 * const cache = new BufferCache({ lock, store: keyv, options: { cacheDefaults: { ttl: 60 } } });
 * ```
 */
export interface BufferCacheParts {
  readonly lock: RedisLockService;
  /** A cache-manager `Cache`, a Keyv instance or a `BufferCacheStore`. Default: the lock's Redis. */
  readonly store?: object;
  /** Default: an engine on `lock` with the same options. */
  readonly engine?: SingleFlightEngine;
  /** The module's options that concern the cache (`cacheDefaults`, `cachePrefix`, `serializer`, …). */
  readonly options?: Partial<Omit<BufferLockOptions, 'redis'>> | FlightOptions;
  readonly messages?: BufferLockMessages;
  /** The clock of entry freshness, in epoch ms. Default `Date.now`. */
  readonly now?: () => number;
}

/**
 * A cache that one worker in the whole fleet fills: a fresh hit costs one store read and no lock;
 * a miss is built once per process and, across processes, once by whichever worker takes the
 * Redis lock, while the others wait for its release and read the entry. A stale entry (past
 * `ttl`, within `grace`) is served at once while one worker refreshes it in the background; a
 * failed refresh keeps serving it and is retried after a back-off. Every value the factory
 * returns is cached, falsy ones included; only a missing entry is a miss. When the lock's Redis is
 * down the build runs without it; when the store fails, the call builds and returns the value.
 *
 * @example
 * ```ts
 * const report = await cache.getOrSet(`report:${id}`, () => buildReport(id), { ttl: 60, grace: 600 });
 * ```
 */
export class BufferCache extends EventEmitter<BufferCacheEvents> {
  private readonly lock: RedisLockService;
  private readonly engine: SingleFlightEngine;
  private readonly entries: EntryStore;
  private readonly messages: BufferLockMessages;
  private readonly options: FlightOptions;
  private readonly settings: CallSettings;
  private readonly log: ThrottledLog;
  private readonly now: () => number;
  private readonly builds = new LocalFlights();
  private readonly builder: EntryBuilder;
  private readonly refreshes: StaleRefresh;

  constructor(given: BufferCacheParts) {
    super();
    this.lock = given.lock;
    this.messages = given.messages ?? new BufferLockMessages();
    this.options = resolveFlightOptions(given.options, this.lock.ttl, this.messages);
    this.engine =
      given.engine ??
      new SingleFlightEngine({ lock: this.lock, options: this.options, messages: this.messages });
    const { cacheDefaults } = this.options;
    this.settings = new CallSettings(
      {
        ...cacheDefaults,
        lockTtl: cacheDefaults.lockTtl ?? this.options.ttl,
        lockTimeout: cacheDefaults.lockTimeout ?? this.options.lockTimeout,
      },
      this.messages,
    );
    this.now = given.now ?? Date.now;
    this.log = new ThrottledLog(
      this.options.logger,
      this.messages,
      this.options.logInterval * 1000,
      this.now,
    );
    this.entries = new EntryStore({
      lock: this.lock,
      cache: given.store ?? this.options.cache,
      prefix: this.options.cachePrefix,
      serializer: this.options.serializer ?? JSON_RESULT_SERIALIZER,
      messages: this.messages,
      log: this.log,
      now: this.now,
    });
    this.builder = new EntryBuilder({
      engine: this.engine,
      entries: this.entries,
      now: this.now,
      events: this,
      onRedisError: this.options.onRedisError,
    });
    this.refreshes = new StaleRefresh({
      lock: this.lock,
      messages: this.messages,
      log: this.log,
      now: this.now,
      options: this.options,
      events: this,
      builder: this.builder,
    });
  }

  /**
   * The cached value of `key`, or the factory's value, built once across the fleet and stored.
   * Rejects with the factory's error when there is no entry to fall back on, and with a catalog
   * `LockError` for a value the serializer cannot store (nothing is stored then).
   */
  getOrSet<T>(
    key: string,
    factory: () => T | Promise<T>,
    options?: BufferCacheOptions,
  ): Promise<Awaited<T>> {
    return this[LOOKUP](key, factory, options).then((lookup) => lookup.value);
  }

  /** The value of `key` while its entry may be served (fresh or within `grace`), else `undefined`. */
  async get<T = unknown>(key: string): Promise<T | undefined> {
    const entry = await this.entries.lookup(key, this.lockKeyOf(key));
    return entry && this.now() < entry.staleUntil ? (entry.value as T) : undefined;
  }

  /** Stores `value` under `key` as a fresh entry, with no lock. */
  async set(key: string, value: unknown, options?: BufferCacheOptions): Promise<void> {
    const settings = this.settings.of(options);
    const text = this.entries.encode(key, value, settings);
    await this.entries.write(key, this.lockKeyOf(key), text, settings);
  }

  /** Deletes the entry of `key`: the next call builds it (once across the fleet). */
  async delete(key: string): Promise<void> {
    await this.entries.delete(key, this.lockKeyOf(key));
  }

  /** {@link getOrSet} with how the value was had. Internal to the library. */
  [LOOKUP]<T>(
    key: string,
    factory: () => T | Promise<T>,
    options?: BufferCacheOptions,
  ): Promise<CacheLookup<Awaited<T>>> {
    let settings: CacheSettings;
    let lockKey: string;
    try {
      settings = this.settings.of(options);
      lockKey = this.lockKeyOf(key);
    } catch (error) {
      // Bad options or key reject, as they did before any lookup was made.
      return Promise.reject(error);
    }
    // One boolean read when nobody listens: no trace object, no closure.
    if (!cacheChannel.hasSubscribers) return this.lookup(key, lockKey, factory, settings);
    const trace = cacheTraceOf(key, lockKey, this.options.traceKeys);
    return traced(cacheChannel, trace, () => this.lookup(key, lockKey, factory, settings, trace));
  }

  private async lookup<T>(
    key: string,
    lockKey: string,
    factory: () => T | Promise<T>,
    settings: CacheSettings,
    trace?: CacheTrace,
  ): Promise<CacheLookup<Awaited<T>>> {
    const entry = await this.entries.lookup(key, lockKey);
    const now = this.now();
    if (entry && now < entry.freshUntil) {
      if (trace) trace.role = 'hit';
      this.emit('hit', key);
      return { value: entry.value as Awaited<T>, status: 'hit' };
    }
    if (entry && now < entry.staleUntil) {
      if (trace) trace.role = 'stale';
      this.emit('stale', key);
      const refreshed = this.refreshes.refresh(key, lockKey, factory, settings);
      if (settings.timeout > 0) {
        const fresh = await withinMs(refreshed, toMilliseconds(settings.timeout));
        if (fresh) return { value: fresh.value as Awaited<T>, status: 'miss' };
      }
      return { value: entry.value as Awaited<T>, status: 'stale' };
    }
    this.emit('miss', key);
    if (trace === undefined) {
      const built =
        this.builds.promise<Built | undefined>(lockKey) ??
        this.builds.startPromise(lockKey, () =>
          this.builder.build(key, lockKey, factory, settings, 'wait'),
        );
      return { value: (await built)!.value as Awaited<T>, status: 'miss' };
    }
    trace.role = 'miss';
    const started = nowMs();
    const joined = this.builds.promise<Built | undefined>(lockKey);
    if (joined) {
      // Another call of this process builds it: this one waits for that build.
      const value = (await joined.finally(() => (trace.waitMs = nowMs() - started)))!.value;
      trace.built = false;
      return { value: value as Awaited<T>, status: 'miss' };
    }
    const built = await this.builds.startPromise(lockKey, () =>
      this.builder.build(key, lockKey, factory, settings, 'wait', trace),
    );
    return { value: built!.value as Awaited<T>, status: 'miss' };
  }

  private lockKeyOf(key: string): string {
    if (typeof key !== 'string' || key === '') {
      const id = key === undefined || key === null ? 'lock_key_undefined' : 'lock_key_invalid';
      throw new LockError(id, this.messages.render(id));
    }
    return this.lock.redisKey(key);
  }
}
