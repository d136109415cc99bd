import type { EventEmitter } from 'node:events';
import type { LockGuard } from '../lock/lock-results.js';
import { currentFlight } from '../single-flight/flight-context.js';
import { CROSS_PROCESS, type SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import type { CacheTrace, FlightTrace } from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import type { CacheSettings } from '../options/cache.options.js';
import type { EntryStore } from './entry-store.js';

/**
 * What one build of an entry gave: the value, and whether this process ran the factory for it.
 *
 * @example
 * ```ts
 * const shared: Built = { value: report, built: false }; // another worker built it
 * ```
 */
export interface Built {
  readonly value: unknown;
  readonly built: boolean;
}

/**
 * What an {@link EntryBuilder} works with.
 *
 * @example
 * ```ts
 * const parts: EntryBuilderParts = { engine, entries, now: Date.now, events: cache };
 * ```
 */
export interface EntryBuilderParts {
  readonly engine: SingleFlightEngine;
  readonly entries: EntryStore;
  /** The clock of entry freshness, in epoch ms. */
  readonly now: () => number;
  /** Where `'built'` and `'shared'` are emitted: the cache. */
  readonly events: EventEmitter<BufferCacheEvents>;
  readonly onRedisError: 'proceed' | 'throw';
}

/**
 * Builds cache entries once across the fleet: the factory runs under the Redis lock of the key
 * and the entry is written as the lock is released, or taken from the worker that built it.
 *
 * @example
 * ```ts
 * const builder = new EntryBuilder({ engine, entries, now: Date.now, events: cache });
 * const built = await builder.build(key, lock.redisKey(key), factory, settings, 'wait');
 * ```
 */
export class EntryBuilder {
  private readonly engine: SingleFlightEngine;
  private readonly entries: EntryStore;
  private readonly now: () => number;
  private readonly events: EventEmitter<BufferCacheEvents>;
  private readonly onRedisError: 'proceed' | 'throw';

  constructor(parts: EntryBuilderParts) {
    this.engine = parts.engine;
    this.entries = parts.entries;
    this.now = parts.now;
    this.events = parts.events;
    this.onRedisError = parts.onRedisError;
  }

  /**
   * One build across processes: under the lock the store is read again (another worker may have
   * just built the entry), then the factory runs and the entry is written as the lock is released.
   * A woken waiter takes the entry instead of building. `'skip'`: none if another worker builds.
   * `failed`: what a failed build does with the lock it held (the refresh's back-off).
   */
  async build(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
    onBusy: 'wait' | 'skip',
    trace?: CacheTrace,
    failed?: (guard: LockGuard) => Promise<void>,
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
      onRedisError: this.onRedisError,
      maxHold: undefined,
    } as const;
    // The flight's own trace gives the cache's its wait and hold.
    const times: FlightTrace | undefined = trace && { keyHash: trace.keyHash };
    const hooks = {
      peek: fresh,
      release: (guard: LockGuard) => this.entries.writeAndRelease(guard, key, payload, settings),
      failed,
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
    if (outcome?.built) this.events.emit('built', key);
    else if (outcome && onBusy === 'wait') this.events.emit('shared', key);
    return outcome;
  }
}
