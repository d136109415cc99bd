import { EventEmitter } from 'node:events';
import type { LockGuard } from '../lock/lock-results.js';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import {
  resolveFlightOptions,
  type BufferLockOptions,
  type FlightOptions,
} from '../options/buffer-lock.options.js';
import { JSON_RESULT_SERIALIZER } from '../serialization/result-serializer.js';
import { currentFlight } from '../single-flight/flight-context.js';
import { LocalFlights } from '../single-flight/local-flights.js';
import { CROSS_PROCESS, SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import { ThrottledLog } from '../single-flight/throttled-log.js';
import { CallSettings } from './call-settings.js';
import type { BufferCacheOptions, CacheSettings } from './cache.options.js';
import { EntryStore } from './entry-store.js';
import { toMilliseconds } from '../options/seconds.js';
import { LockError } from '../errors/lock.error.js';
import { errorText } from '../errors/error-text.js';
import {
  cacheChannel,
  keyHashOf,
  nowMs,
  traced,
  type CacheTrace,
  type FlightTrace,
} from '../telemetry/channels.js';

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

/** The outcome of one lookup: the value and how it was had (the interceptor's `X-Cache`). */
export interface CacheLookup<T> {
  readonly value: T;
  readonly status: 'hit' | 'miss' | 'stale';
}

/** The lookup with its status, for the library's own layers (the interceptor). */
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

interface Built {
  readonly value: unknown;
  readonly built: boolean;
}

const MAX_BACKOFF_MS = 30_000;

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
  private readonly refreshes = new Map<string, Promise<Built | undefined>>();
  private readonly backoff = new Map<string, { until: number; failures: number }>();

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
    const trace = this.traceOf(key, lockKey);
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
      const refreshed = this.refresh(key, lockKey, factory, settings);
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
          this.build(key, lockKey, factory, settings, 'wait'),
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
      this.build(key, lockKey, factory, settings, 'wait', trace),
    );
    return { value: built!.value as Awaited<T>, status: 'miss' };
  }

  /** A lookup's trace: the key's hash, the key only with `traceKeys`. */
  private traceOf(key: string, lockKey: string, role?: CacheTrace['role']): CacheTrace {
    const keyHash = keyHashOf(lockKey);
    return this.options.traceKeys ? { keyHash, key, role } : { keyHash, role };
  }

  /** The stale entry's refresh: one per process, and none while another worker refreshes it. */
  private refresh(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
  ): Promise<Built | undefined> {
    const running = this.refreshes.get(lockKey);
    if (running) return running;
    if ((this.backoff.get(lockKey)?.until ?? 0) > this.now()) return Promise.resolve(undefined);
    this.emit('refresh', key);
    const started = cacheChannel.hasSubscribers
      ? this.tracedRefresh(key, lockKey, factory, settings)
      : this.build(key, lockKey, factory, settings, 'skip');
    const refresh = started.then(
      (built) => {
        this.backoff.delete(lockKey);
        return built;
      },
      (error: unknown) => {
        this.refreshFailed(key, lockKey, error);
        return undefined;
      },
    );
    const forget = (): void => void this.refreshes.delete(lockKey);
    void refresh.then(forget);
    this.refreshes.set(lockKey, refresh);
    return refresh;
  }

  /** A refresh as its own operation of the cache channel. */
  private tracedRefresh(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
  ): Promise<Built | undefined> {
    const trace = this.traceOf(key, lockKey, 'refresh');
    return traced(cacheChannel, trace, async () => {
      const built = await this.build(key, lockKey, factory, settings, 'skip', trace);
      if (built === undefined) trace.outcome = 'skipped';
      return built;
    });
  }

  /**
   * One build across processes: under the lock the store is read again (another worker may have
   * just built the entry), then the factory runs and the entry is written as the lock is released.
   * A woken waiter takes the entry instead of building. `'skip'`: none if another worker builds.
   */
  private async build(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
    onBusy: 'wait' | 'skip',
    trace?: CacheTrace,
  ): Promise<Built | undefined> {
    let payload: string | undefined;
    const fresh = async (): Promise<{ value: Built } | undefined> => {
      const entry = await this.entries.read(key, lockKey);
      return entry && this.now() < entry.freshUntil
        ? { value: { value: entry.value, built: false } }
        : undefined;
    };
    const work = async (): Promise<Built> => {
      const found = await fresh();
      if (found) return found.value;
      const value = await factory();
      const text = this.entries.encode(key, value, settings);
      // Without the lock no release follows: the entry is written here.
      if (currentFlight()?.locked) payload = text;
      else await this.entries.write(key, lockKey, text, settings);
      return { value, built: true };
    };
    const flight = {
      ttl: settings.lockTtl,
      lockTimeout: settings.lockTimeout,
      onBusy,
      share: false,
      onRedisError: 'proceed',
      maxHold: undefined,
    } as const;
    // The flight's own trace gives the cache's its wait and hold.
    const times: FlightTrace | undefined = trace && { keyHash: trace.keyHash };
    const hooks = {
      peek: fresh,
      release: (guard: LockGuard) => this.entries.writeAndRelease(guard, key, payload, settings),
      failed:
        onBusy === 'skip' ? (guard: LockGuard) => this.holdAfterFailure(guard, lockKey) : undefined,
    };
    let outcome: Built | undefined;
    try {
      outcome = (await this.engine[CROSS_PROCESS](key, lockKey, work, flight, hooks, times)) as
        Built | undefined;
    } finally {
      if (trace && times) {
        trace.waitMs = times.waitMs;
        trace.holdMs = times.holdMs;
      }
    }
    if (trace) trace.built = outcome?.built ?? false;
    if (outcome?.built) this.emit('built', key);
    else if (outcome && onBusy === 'wait') this.emit('shared', key);
    return outcome;
  }

  /** A failed refresh keeps the lock for the back-off: no worker in the fleet retries before. */
  private async holdAfterFailure(guard: LockGuard, lockKey: string): Promise<void> {
    const failures = (this.backoff.get(lockKey)?.failures ?? 0) + 1;
    const ms = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (failures - 1));
    this.backoff.set(lockKey, { until: this.now() + ms, failures });
    const [extended] = await this.lock.extend(guard, ms / 1000);
    if (!extended) await this.lock.release(guard);
  }

  private refreshFailed(key: string, lockKey: string, error: unknown): void {
    const state = this.backoff.get(lockKey) ?? { until: this.now() + 1000, failures: 1 };
    this.backoff.set(lockKey, state);
    const line = this.messages.render('cache_refresh_failed', {
      ERROR: errorText(error),
      SECONDS: Math.max(1, Math.round((state.until - this.now()) / 1000)),
    });
    this.log.warn('cache_refresh_failed', line);
    try {
      this.emit('refresh-failed', key, error);
    } catch {
      // A listener's error is the listener's.
    }
  }

  private lockKeyOf(key: string): string {
    if (typeof key !== 'string' || key === '') {
      const id = key === undefined || key === null ? 'lock_key_undefined' : 'lock_key_invalid';
      throw new LockError(id, this.messages.render(id));
    }
    return this.lock.redisKey(key);
  }
}

/** `promise`'s value if it settles within `ms`, else `undefined`. Never rejects. */
function withinMs<T>(promise: Promise<T | undefined>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  return Promise.race([promise.catch(() => undefined), late]).finally(() => clearTimeout(timer));
}
