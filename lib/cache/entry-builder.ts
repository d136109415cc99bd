import type { EventEmitter } from 'node:events';
import { LockError } from '../errors/lock.error.js';
import type { LockGuard } from '../lock/lock-results.js';
import { errorText } from '../messages/error-text.js';
import type { CacheSettings } from '../options/cache.options.js';
import { within } from '../options/seconds.js';
import { currentFlight } from '../single-flight/flight-context.js';
import { CROSS_PROCESS, type SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import {
  cacheChannel,
  keyHashOf,
  traced,
  type CacheTrace,
  type FlightTrace,
} from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import { RELEASE_WRITING } from '../lock/redis-lock.service.js';
import { backoffKey } from '../redis/keys.js';
import { lockPttl } from '../redis/plain-commands.js';
import type { CacheEntry } from './entry-codec.js';
import type { CacheParts } from './cache-parts.js';
import type { EntryStore, Released } from './entry-store.js';
import { moment } from './moment.js';
import { timedOf } from './timed.js';
import type { TagStamp } from './tag-versions.js';

/** One build's value, and whether this process ran the factory for it. */
export interface Built {
  readonly value: unknown;
  readonly built: boolean;
  /**
   * Which of the calls that joined the build may take its value: those that began by this time
   * (`moment()`); the others look up again, as they may have begun after a write that replaced it.
   * When Redis vouched for the value: as its read was sent (or its wake-up heard), or as the release
   * that stored it, finding no later write, was sent. When nothing could (built without the lock,
   * or its release failed): as its factory began. `-Infinity` when a write or a tag delete came
   * after the build began (its own caller still takes it).
   */
  readonly asOf: number;
}

export interface EntryBuilderParts extends CacheParts {
  readonly engine: SingleFlightEngine;
  readonly entries: EntryStore;
  readonly events: EventEmitter<BufferCacheEvents>;
}

/** How a build came about. */
interface BuildContext {
  /** A failed build's use of its lock (the back-off). */
  readonly failed?: (guard: LockGuard) => Promise<void>;
  /** The `freshUntil` an early refresh saw: only a newer entry skips the build. */
  readonly seen?: number;
  /** The lookup saw the key's lock held: wait for its release before the first try. */
  readonly lockHeld?: boolean;
  /** The lookup took the key's lock, finding no entry: build with it, with no read again. */
  readonly claimed?: LockGuard;
  /**
   * The entry is past its grace, kept for `staleIfError`: a failure backs off as a failed refresh
   * does (logged, `'refresh-failed'`), and a waiter woken by another worker's failure does not try
   * again meanwhile.
   */
  readonly failSafe?: boolean;
}

const MAX_BACKOFF_MS = 30_000;
const SWEEP_MS = 5000;

// XFetch (Vattani et al., PVLDB 2015), bounded to the last half of `ttl`: at most ~2 builds a ttl.
export function refreshesEarly(entry: CacheEntry, now: number, settings: CacheSettings): boolean {
  if (settings.earlyRefresh === false) return false;
  const left = entry.freshUntil - now;
  const beta = settings.earlyRefresh === true ? 1 : Number(settings.earlyRefresh);
  return left < settings.ttl * 500 && -entry.deltaMs * beta * Math.log(Math.random()) >= left;
}

const backoffMs = (failures: number): number =>
  Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (failures - 1));

/**
 * Builds entries once across the fleet, under the key's lock (a woken waiter reads the entry
 * instead), and refreshes stale ones in the background: one refresh per key per process, none
 * while another worker refreshes it, none in the fleet for a back-off after a failure (1 s
 * doubling, 30 s at most).
 */
export class EntryBuilder {
  private readonly refreshes = new Map<string, Promise<Built | undefined>>();
  private readonly backoff = new Map<string, { until: number; failures: number }>();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(private readonly parts: EntryBuilderParts) {}

  /** A lookup's or a refresh's trace: the key itself only with `traceKeys`. */
  traceOf(key: string, lockKey: string, role?: CacheTrace['role']): CacheTrace {
    const keyHash = keyHashOf(lockKey);
    return this.parts.options.traceKeys ? { keyHash, key, role } : { keyHash, role };
  }

  async build(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
    onBusy: 'wait' | 'skip',
    trace: CacheTrace,
    { failed, seen, lockHeld, claimed, failSafe }: BuildContext = {},
  ): Promise<Built | undefined> {
    const { engine, entries, now, events, options, messages } = this.parts;
    const { hardTimeout } = settings;
    let payload: string | undefined;
    // The value's own freshness, when its factory gave one (`Timed`).
    let stored = settings;
    let stamps: readonly TagStamp[] | undefined;
    let released: Released | undefined;
    let factoryStart = -Infinity;
    let releasing = -Infinity;
    // Read again under the lock: another worker may have just written the entry. After a wake-up,
    // the entry it carried.
    const fresh = async (carried?: string): Promise<{ value: Built } | undefined> => {
      const asOf = moment();
      const entry = await entries.read(key, lockKey, carried);
      return entry && now() < entry.freshUntil && entry.freshUntil > (seen ?? 0)
        ? { value: { value: entry.value, built: false, asOf } }
        : undefined;
    };
    // The lock the work runs under: claimed with it by the lookup, else claimed here.
    let holder: LockGuard | undefined;
    const work = async (): Promise<Built> => {
      const claiming = holder && holder !== claimed ? entries.claim(holder) : undefined;
      const found = claimed ? undefined : await fresh();
      await claiming;
      if (found) return found.value;
      // Read before the value is made: a tag deleted while it is made makes it a miss.
      stamps = await entries.stamps(settings.tags);
      const started = now();
      factoryStart = moment();
      const [value, own] = timedOf(await bounded(factory()), settings);
      stored = own;
      const text = entries.codec.encode(key, value, own, now() - started, stamps);
      // Only a build under the lock is checked against the writes that came after it began (its
      // release), so only it stores; and nothing is written that tags could not invalidate.
      payload = stamps && currentFlight()?.locked ? text : undefined;
      // What a hit will return: the value as the serializer gives it back.
      return { value: entries.codec.decode(text, key).value, built: true, asOf: factoryStart };
    };
    // Past `hardTimeout` the build fails (its lock is released) and a late value is dropped.
    const bounded = (made: unknown): unknown => {
      if (typeof (made as { then?: unknown } | null)?.then !== 'function') return made;
      return within(made as PromiseLike<unknown>, hardTimeout, () => {
        const text = messages.render('cache_build_timeout', { KEY: key, SECONDS: hardTimeout });
        throw new LockError('cache_build_timeout', text);
      });
    };
    const peek = async (carried?: string): Promise<{ value: Built } | undefined> => {
      const found = await fresh(carried);
      if (found || !failSafe || !(await this.backingOff(lockKey))) return found;
      const ms = (this.backoff.get(lockKey)?.until ?? 0) - now();
      const text = messages.render('cache_rebuild_backing_off', {
        KEY: key,
        SECONDS: Math.max(1, Math.round(ms / 1000)),
      });
      throw new LockError('cache_rebuild_backing_off', text);
    };
    const flight = {
      ttl: settings.lockTtl,
      lockTimeout: settings.lockTimeout,
      onBusy,
      share: false,
      onRedisError: options.onRedisError,
      maxHold: undefined,
    };
    const hooks = {
      peek,
      release: async (guard: LockGuard): Promise<LockError | undefined> => {
        releasing = moment();
        released = await entries.writeAndRelease(guard, key, payload, stored);
        return released.error;
      },
      failed: failSafe
        ? (guard: LockGuard) => this.holdAfterFailure(guard, lockKey)
        : (failed ?? ((guard: LockGuard) => entries.release(guard).then(() => undefined))),
      lockHeld,
      claimed,
      holding: (guard: LockGuard) => void (holder = guard),
    };
    const times: FlightTrace = { keyHash: trace.keyHash };
    let outcome: Built | undefined;
    try {
      outcome = (await engine[CROSS_PROCESS](key, lockKey, work, flight, hooks, times)) as
        Built | undefined;
    } catch (error) {
      // Another worker's failure was logged there.
      const elsewhere = error instanceof LockError && error.code === 'cache_rebuild_backing_off';
      if (failSafe && !elsewhere) this.refreshFailed(key, lockKey, error);
      throw error;
    } finally {
      trace.waitMs = times.waitMs;
      trace.holdMs = times.holdMs;
    }
    trace.built = outcome?.built ?? false;
    if (failSafe && outcome) this.backoff.delete(lockKey);
    if (outcome?.built) {
      const outdated =
        released?.outdated || (stamps?.length && !(await entries.hold(stamps, true)));
      if (outdated) outcome = { ...outcome, asOf: -Infinity };
      else if (released?.written) outcome = { ...outcome, asOf: releasing };
    }
    if (outcome?.built) events.emit('built', key);
    else if (outcome && onBusy === 'wait') events.emit('shared', key);
    return outcome;
  }

  /** Resolves `undefined` when skipped, or failed (logged, `'refresh-failed'`); never rejects. */
  refresh(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
    seen?: number,
  ): Promise<Built | undefined> {
    const running = this.refreshes.get(lockKey);
    if (running) return running;
    const { now, events } = this.parts;
    if ((this.backoff.get(lockKey)?.until ?? 0) > now()) return Promise.resolve(undefined);
    events.emit('refresh', key);
    const hold = (guard: LockGuard): Promise<void> => this.holdAfterFailure(guard, lockKey);
    const trace = this.traceOf(key, lockKey, 'refresh');
    const refresh = traced(cacheChannel, trace, async () => {
      const built = (await this.backingOff(lockKey))
        ? undefined
        : await this.build(key, lockKey, factory, settings, 'skip', trace, { failed: hold, seen });
      if (built === undefined) trace.outcome = 'skipped';
      return built;
    }).then(
      (built) => {
        if (built) this.backoff.delete(lockKey);
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

  /**
   * A failed refresh releases the lock and leaves a back-off mark for as long: no worker in the
   * fleet refreshes the key before, while a miss (no entry to serve) still builds at once.
   */
  private async holdAfterFailure(guard: LockGuard, lockKey: string): Promise<void> {
    const { lock, now } = this.parts;
    const failures = (this.backoff.get(lockKey)?.failures ?? 0) + 1;
    const ms = backoffMs(failures);
    this.backOff(lockKey, { until: now() + ms, failures });
    const mark = { prefix: '', role: 'backoff' as const, payload: '1', ttlMs: ms };
    await lock[RELEASE_WRITING](guard, mark);
  }

  /** Whether a failed refresh of the key, here or in another worker, is still backing off. */
  async backingOff(lockKey: string): Promise<boolean> {
    const { lock, now } = this.parts;
    if ((this.backoff.get(lockKey)?.until ?? 0) > now()) return true;
    let ms: number;
    try {
      ms = Number(await lockPttl(await lock.getClient(), backoffKey(lockKey)));
    } catch {
      // Unknown: the refresh's own acquire meets the trouble, as without a back-off.
      return false;
    }
    if (!(ms > 0)) return false;
    const failures = this.backoff.get(lockKey)?.failures ?? 1;
    this.backOff(lockKey, { until: now() + ms, failures });
    return true;
  }

  // A failure counts for its back-off and as long again (the next one doubles it), then goes:
  // a key never read again leaves nothing.
  private backOff(lockKey: string, state: { until: number; failures: number }): void {
    this.backoff.set(lockKey, state);
    this.sweeper ??= setTimeout(() => this.sweep(), SWEEP_MS).unref();
  }

  private sweep(): void {
    const now = this.parts.now();
    for (const [key, { until, failures }] of this.backoff) {
      if (now >= until + backoffMs(failures)) this.backoff.delete(key);
    }
    this.sweeper =
      this.backoff.size > 0 ? setTimeout(() => this.sweep(), SWEEP_MS).unref() : undefined;
  }

  private refreshFailed(key: string, lockKey: string, error: unknown): void {
    const { messages, log, now, events } = this.parts;
    const state = this.backoff.get(lockKey) ?? { until: now() + 1000, failures: 1 };
    this.backOff(lockKey, state);
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
