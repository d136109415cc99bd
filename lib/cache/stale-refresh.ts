import type { EventEmitter } from 'node:events';
import type { LockGuard } from '../lock/lock-results.js';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { FlightOptions } from '../options/buffer-lock.options.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';
import { errorText } from '../messages/error-text.js';
import { cacheChannel, traced } from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import type { CacheSettings } from '../options/cache.options.js';
import { cacheTraceOf } from './cache-trace.js';
import type { Built, EntryBuilder } from './entry-builder.js';

/**
 * What a {@link StaleRefresh} works with.
 *
 * @example
 * ```ts
 * const parts: StaleRefreshParts = { lock, messages, log, now: Date.now, options, events, builder };
 * ```
 */
export interface StaleRefreshParts {
  readonly lock: RedisLockService;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly now: () => number;
  /** The cache's options: `traceKeys` says whether a refresh's trace carries the key. */
  readonly options: Pick<FlightOptions, 'traceKeys'>;
  /** Where `'refresh'` and `'refresh-failed'` are emitted: the cache. */
  readonly events: EventEmitter<BufferCacheEvents>;
  readonly builder: EntryBuilder;
}

const MAX_BACKOFF_MS = 30_000;

/**
 * The background refresh of stale entries: one per key per process, none while another worker
 * refreshes it, and after a failure none across the fleet until a back-off (1 s, doubling, at most
 * 30 s) has passed; the stale entry is served meanwhile.
 *
 * @example
 * ```ts
 * const refreshes = new StaleRefresh({ lock, messages, log, now: Date.now, options, events, builder });
 * const fresh = await refreshes.refresh(key, lock.redisKey(key), factory, settings);
 * ```
 */
export class StaleRefresh {
  private readonly lock: RedisLockService;
  private readonly messages: BufferLockMessages;
  private readonly log: ThrottledLog;
  private readonly now: () => number;
  private readonly options: Pick<FlightOptions, 'traceKeys'>;
  private readonly events: EventEmitter<BufferCacheEvents>;
  private readonly builder: EntryBuilder;
  private readonly refreshes = new Map<string, Promise<Built | undefined>>();
  private readonly backoff = new Map<string, { until: number; failures: number }>();

  constructor(parts: StaleRefreshParts) {
    this.lock = parts.lock;
    this.messages = parts.messages;
    this.log = parts.log;
    this.now = parts.now;
    this.options = parts.options;
    this.events = parts.events;
    this.builder = parts.builder;
  }

  /** The stale entry's refresh: one per process, and none while another worker refreshes it. */
  refresh(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
  ): Promise<Built | undefined> {
    const running = this.refreshes.get(lockKey);
    if (running) return running;
    if ((this.backoff.get(lockKey)?.until ?? 0) > this.now()) return Promise.resolve(undefined);
    this.events.emit('refresh', key);
    const hold = (guard: LockGuard): Promise<void> => this.holdAfterFailure(guard, lockKey);
    const started = cacheChannel.hasSubscribers
      ? this.tracedRefresh(key, lockKey, factory, settings, hold)
      : this.builder.build(key, lockKey, factory, settings, 'skip', undefined, hold);
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

  /** A failed refresh keeps the lock for the back-off: no worker in the fleet retries before. */
  private async holdAfterFailure(guard: LockGuard, lockKey: string): Promise<void> {
    const failures = (this.backoff.get(lockKey)?.failures ?? 0) + 1;
    const ms = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (failures - 1));
    this.backoff.set(lockKey, { until: this.now() + ms, failures });
    const [extended] = await this.lock.extend(guard, ms / 1000);
    if (!extended) await this.lock.release(guard);
  }

  /** A refresh as its own operation of the cache channel. */
  private tracedRefresh(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
    hold: (guard: LockGuard) => Promise<void>,
  ): Promise<Built | undefined> {
    const trace = cacheTraceOf(key, lockKey, this.options.traceKeys, 'refresh');
    return traced(cacheChannel, trace, async () => {
      const built = await this.builder.build(key, lockKey, factory, settings, 'skip', trace, hold);
      if (built === undefined) trace.outcome = 'skipped';
      return built;
    });
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
      this.events.emit('refresh-failed', key, error);
    } catch {
      // A listener's error is the listener's.
    }
  }
}
