import type { EventEmitter } from 'node:events';
import type { LockGuard } from '../lock/lock-results.js';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { CacheSettings } from '../options/cache.options.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';
import { cacheChannel, traced } from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import { cacheTraceOf, type Built, type EntryBuilder } from './entry-builder.js';

export interface StaleRefreshParts {
  readonly lock: RedisLockService;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly now: () => number;
  readonly traceKeys: boolean;
  readonly events: EventEmitter<BufferCacheEvents>;
  readonly builder: EntryBuilder;
}

const MAX_BACKOFF_MS = 30_000;

/**
 * Background refreshes of stale entries: one per key per process, none while another worker
 * refreshes it, and after a failure none in the fleet until a back-off (1 s doubling, 30 s at most).
 */
export class StaleRefresh {
  private readonly refreshes = new Map<string, Promise<Built | undefined>>();
  private readonly backoff = new Map<string, { until: number; failures: number }>();

  constructor(private readonly parts: StaleRefreshParts) {}

  refresh(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
  ): Promise<Built | undefined> {
    const running = this.refreshes.get(lockKey);
    if (running) return running;
    const { now, events, builder, traceKeys } = this.parts;
    if ((this.backoff.get(lockKey)?.until ?? 0) > now()) return Promise.resolve(undefined);
    events.emit('refresh', key);
    const hold = (guard: LockGuard): Promise<void> => this.holdAfterFailure(guard, lockKey);
    const trace = cacheTraceOf(key, lockKey, traceKeys, 'refresh');
    const refresh = traced(cacheChannel, trace, async () => {
      const built = await builder.build(key, lockKey, factory, settings, 'skip', trace, hold);
      if (built === undefined) trace.outcome = 'skipped';
      return built;
    }).then(
      (built) => {
        this.backoff.delete(lockKey);
        return built;
      },
      (error: unknown) => {
        this.refreshFailed(key, lockKey, error);
        return undefined;
      },
    );
    this.refreshes.set(lockKey, refresh);
    void refresh.then(() => this.refreshes.delete(lockKey));
    return refresh;
  }

  /** A failed refresh keeps the lock for the back-off: no worker in the fleet retries before. */
  private async holdAfterFailure(guard: LockGuard, lockKey: string): Promise<void> {
    const { lock, now } = this.parts;
    const failures = (this.backoff.get(lockKey)?.failures ?? 0) + 1;
    const ms = Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (failures - 1));
    this.backoff.set(lockKey, { until: now() + ms, failures });
    const [extended] = await lock.extend(guard, ms / 1000);
    if (!extended) await lock.release(guard);
  }

  private refreshFailed(key: string, lockKey: string, error: unknown): void {
    const { messages, log, now, events } = this.parts;
    const state = this.backoff.get(lockKey) ?? { until: now() + 1000, failures: 1 };
    this.backoff.set(lockKey, state);
    const line = messages.render('cache_refresh_failed', {
      ERROR: errorText(error),
      SECONDS: Math.max(1, Math.round((state.until - now()) / 1000)),
    });
    log.warn('cache_refresh_failed', line);
    try {
      events.emit('refresh-failed', key, error);
    } catch {
      // A listener's error is the listener's.
    }
  }
}
