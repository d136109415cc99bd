import { EventEmitter } from 'node:events';
import { LockError } from '../errors/lock.error.js';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import { resolveFlightOptions, type BufferLockOptions } from '../options/buffer-lock.options.js';
import {
  isTags,
  type BufferCacheOptions,
  type CacheSettings,
  type HttpCacheOptionsDto,
} from '../options/cache.options.js';
import { within } from '../options/seconds.js';
import type { Stored } from '../serialization/stored.js';
import { LocalFlights } from '../single-flight/local-flights.js';
import { SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import { ThrottledLog } from '../single-flight/throttled-log.js';
import {
  cacheChannel,
  nowMs,
  traced as traceCall,
  type CacheTrace,
} from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import {
  DELETE_URL,
  HTTP,
  LockKeys,
  LOOKUP,
  PUT,
  RECORD_GET,
  RECORD_SET,
  spaced,
} from './cache-keys.js';
import { CallSettings } from './call-settings.js';
import { EntryBuilder, refreshesEarly, type Built } from './entry-builder.js';
import { EntryStore, type CacheEntry, type Found } from './entry-store.js';
import { failSafeLookup, type Asked, type Missed } from './fail-safe.js';
import { SharedLookups, type CacheLookup } from './shared-lookups.js';
import { moment } from './moment.js';
import { timedOf } from './timed.js';

export type { CacheLookup } from './shared-lookups.js';
export { HTTP, LOOKUP, PUT, RECORD_GET, RECORD_SET } from './cache-keys.js';

/** Lookups again after an outdated build, before a call makes its value for itself. */
const MAX_RETRIES = 2;

/**
 * A cache that one worker in the whole fleet fills: a fresh hit is one store read and no lock; a
 * miss is built once, by whichever worker takes the key's Redis lock, while the others wait and
 * read the entry. A stale entry (past `ttl`, within `grace`) is served at once while one worker
 * refreshes it; with `staleIfError`, an expired one is served when its rebuild fails. A failing
 * store is a miss (logged); with the lock's Redis down a miss is built without the lock, or
 * rejects with `onRedisError: 'throw'`.
 *
 * @example
 * ```ts
 * const report = await cache.getOrSet(`report:${id}`, () => buildReport(id), { ttl: 60, grace: 600 });
 * ```
 */
export class BufferCache extends EventEmitter<BufferCacheEvents> {
  private readonly lock: RedisLockService;
  private readonly messages: BufferLockMessages;
  private readonly settings: CallSettings;
  private readonly now: () => number;
  private readonly entries: EntryStore;
  private readonly builder: EntryBuilder;
  private readonly builds = new LocalFlights();
  private readonly lockKeys: LockKeys;
  private readonly lookups = new SharedLookups();
  /** @internal */
  readonly [HTTP]: Readonly<HttpCacheOptionsDto>;

  constructor(given: {
    readonly lock: RedisLockService;
    /** A cache-manager `Cache`, a Keyv or a `BufferCacheStore`. Default: the lock's Redis. */
    readonly store?: object;
    readonly engine?: SingleFlightEngine;
    readonly options?: Partial<Omit<BufferLockOptions, 'redis'>>;
    readonly messages?: BufferLockMessages;
    readonly now?: () => number;
  }) {
    super();
    const lock = (this.lock = given.lock);
    const messages = (this.messages = given.messages ?? new BufferLockMessages());
    this.lockKeys = new LockKeys(lock, messages);
    const options = resolveFlightOptions(given.options, lock.ttl, messages);
    const engine = given.engine ?? new SingleFlightEngine({ lock, options, messages });
    const now = (this.now = given.now ?? Date.now);
    this[HTTP] = options.http;
    this.settings = new CallSettings(options, messages);
    const log = new ThrottledLog(options.logger, messages, options.logInterval * 1000, now);
    const parts = { lock, options, messages, log, now };
    const entries = (this.entries = new EntryStore(parts, given.store ?? options.cache));
    this.builder = new EntryBuilder({ ...parts, engine, entries, events: this });
  }

  /**
   * The cached value of `key`, or the factory's, built once across the fleet and stored. Rejects
   * with the factory's error when there is no entry to fall back on. The value is typed as it
   * comes back through the serializer (`Stored<T>`), in every worker alike.
   */
  getOrSet<T>(
    key: string,
    factory: () => T | Promise<T>,
    options?: BufferCacheOptions,
  ): Promise<Stored<Awaited<T>>> {
    return this[LOOKUP](key, factory, options).then((lookup) => lookup.value as Stored<Awaited<T>>);
  }

  /** The value of `key` while its entry may be served (fresh or within `grace`), else `undefined`. */
  async get<T = unknown>(key: string): Promise<Stored<T> | undefined> {
    key = spaced(key);
    const lockKey = this.lockKeyOf(key);
    const entry =
      this.entries.local(key) ?? (await this.entries.lookup(key, lockKey, undefined, true)).entry;
    return entry && this.now() < entry.staleUntil ? (entry.value as Stored<T>) : undefined;
  }

  /** Stores `value` under `key` as a fresh entry, with no lock. */
  async set(key: string, value: unknown, options?: BufferCacheOptions): Promise<void> {
    await this.put(spaced(key), value, options, false);
  }

  /** @internal `set`, resolving to the value as a hit will return it (`@CachePut`). */
  [PUT](key: string, value: unknown, options?: BufferCacheOptions): Promise<unknown> {
    return this.put(spaced(key), value, options, true);
  }

  /** @internal An idempotency record, in a key space of its own; rejects when the store fails. */
  async [RECORD_GET]<T>(key: string): Promise<Stored<T> | undefined> {
    key = spaced(key, 'i');
    const entry = await this.entries.readOrFail(key, this.lockKeyOf(key));
    return entry && this.now() < entry.staleUntil ? (entry.value as Stored<T>) : undefined;
  }

  /** @internal Keeps an idempotency record for `ttl` seconds. */
  async [RECORD_SET](key: string, value: unknown, ttl: number): Promise<void> {
    await this.put(spaced(key, 'i'), value, { ttl, grace: 0, l1: false }, false);
  }

  private async put(
    key: string,
    value: unknown,
    options: BufferCacheOptions | undefined,
    answer: boolean,
  ): Promise<unknown> {
    const settings = this.settings.of(options);
    const lockKey = this.lockKeyOf(key);
    const stamps = await this.entries.stampsForWrite(key, lockKey, settings.tags);
    const text = this.entries.codec.encode(key, value, settings, 0, stamps);
    const keep = settings.l1 && this.entries.keepsCopies;
    // Decoded only for what needs the value as a hit returns it: l1's copy, @CachePut's answer.
    const entry = keep || answer ? this.entries.codec.decode(text, key) : undefined;
    await this.entries.write(key, lockKey, text, settings, keep ? entry : undefined);
    this.detach(lockKey);
    return entry?.value;
  }

  /**
   * Every entry carrying one of `tags` is a miss from now on, in every process (`l1` included),
   * and is never served again, not even within `grace`. One Redis command, whatever the number
   * of entries; rejects with `cache_delete_by_tag_failed` when Redis cannot be reached.
   */
  async deleteByTag(tags: string | readonly string[]): Promise<void> {
    const list = typeof tags === 'string' ? [tags] : tags;
    if (!isTags(list) || list.length === 0) {
      throw new LockError('cache_tags_invalid', this.messages.render('cache_tags_invalid'));
    }
    try {
      await this.entries.deleteByTag(list);
      this.lookups.detachTagged(list);
    } catch (error) {
      const text = this.messages.render('cache_delete_by_tag_failed', { ERROR: errorText(error) });
      throw new LockError('cache_delete_by_tag_failed', text, { cause: error });
    }
  }

  /** Deletes the entry of `key`: the next call builds it (once across the fleet). */
  delete(key: string): Promise<void> {
    return this[DELETE_URL](key, false);
  }

  /** @internal */ async [DELETE_URL](key: string, url = true): Promise<void> {
    key = spaced(key, url ? 'u' : undefined);
    const lockKey = this.lockKeyOf(key);
    await this.entries.delete(key, lockKey);
    this.detach(lockKey);
  }

  /** A write of the key returned: no later call in this process takes what began before it. */
  private detach(lockKey: string): void {
    this.lookups.detach(lockKey);
    this.builds.detach(lockKey);
  }

  /** @internal `space`: the interceptor's keys of URLs (`u`) or messages (`r`). */
  [LOOKUP]<T>(
    key: string,
    factory: () => T | Promise<T>,
    options?: BufferCacheOptions,
    space?: 'u' | 'r',
  ): Promise<CacheLookup<Awaited<T>>> {
    try {
      key = spaced(key, space);
      const settings = this.settings.of(options);
      const held = settings.l1 ? this.entries.local(key) : undefined;
      const traced = cacheChannel.hasSubscribers;
      // A fresh copy in `l1` is served with nothing sent, unless the call is traced.
      if (held && !traced && this.now() < held.freshUntil) {
        // Not shared with any other call: nothing later can take it.
        return Promise.resolve(this.hit(key, undefined, held, factory, settings, Infinity));
      }
      const lockKey = this.lockKeyOf(key);
      const call = { key, lockKey, factory, settings, asked: moment() };
      // A traced call is a lookup of its own, with a trace of its own.
      if (traced) {
        const trace = this.builder.traceOf(key, lockKey);
        return traceCall(cacheChannel, trace, () => this.lookup(call, trace, held));
      }
      const running = this.lookups.under(lockKey, settings);
      // The value is the one of the same key's factory: its type is the caller's.
      if (running) return this.joined(running as Promise<CacheLookup<Awaited<T>>>, call);
      const outcome = this.lookup(call, this.builder.traceOf(key, lockKey), held);
      this.lookups.share(lockKey, settings, outcome);
      return outcome;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * A call that took the outcome of the lookup under way: its event is its own. An outcome not
   * known current when this call began is looked up again: a write may have replaced it before.
   */
  private joined<T>(
    outcome: Promise<CacheLookup<Awaited<T>>>,
    call: Asked<T>,
  ): Promise<CacheLookup<Awaited<T>>> {
    return outcome.then((found) => {
      if (found.asOf < call.asked) {
        const trace = this.builder.traceOf(call.key, call.lockKey);
        return this.lookup(call, trace, undefined, MAX_RETRIES - 1);
      }
      this.emit(found.status, call.key);
      return found;
    });
  }

  private async lookup<T>(
    call: Asked<T>,
    trace: CacheTrace,
    held: CacheEntry | undefined,
    retries = MAX_RETRIES,
  ): Promise<CacheLookup<Awaited<T>>> {
    const { key, lockKey, factory, settings } = call;
    const found: Found = held
      ? { entry: held, lockHeld: false, readAt: moment() }
      : await this.entries.lookup(key, lockKey, settings.lockTtl, settings.l1);
    const { entry } = found;
    const now = this.now();
    if (entry && now < entry.freshUntil) {
      trace.role = 'hit';
      return this.hit(key, lockKey, entry, factory, settings, found.readAt);
    }
    if (entry && now < entry.staleUntil) {
      trace.role = 'stale';
      this.emit('stale', key);
      const refreshed = this.builder.refresh(key, lockKey, factory, settings);
      const fresh =
        settings.timeout > 0 && (await within(refreshed, settings.timeout, () => undefined));
      if (fresh && fresh.asOf >= call.asked) {
        return { value: fresh.value as Awaited<T>, status: 'miss', asOf: fresh.asOf };
      }
      return { value: entry.value as Awaited<T>, status: 'stale', asOf: found.readAt };
    }
    trace.role = 'miss';
    const missed = { ...call, trace, found, retries };
    // Past its grace, an entry kept for `staleIfError` is served only if its rebuild fails.
    if (!entry || now >= entry.staleUntil + settings.staleIfError * 1000) return this.miss(missed);
    const parts = { builder: this.builder, entries: this.entries, events: this, now: this.now };
    return failSafeLookup(parts, { ...missed, entry }, () => this.miss(missed, true));
  }

  /** A missing or expired entry's build; `failSafe`: its event is the caller's, once it is known. */
  private async miss<T>(call: Missed<T>, failSafe = false): Promise<CacheLookup<Awaited<T>>> {
    const { key, lockKey, factory, settings, trace, found, retries, asked } = call;
    const { lockHeld } = found;
    // The lock this lookup took (its entry was missing) goes to the build, if this call starts one.
    const claimed = found.claim?.();
    const joined = this.builds.promise<Built | undefined>(lockKey);
    if (joined) {
      if (claimed) void this.lock.release(claimed);
      if (!failSafe) this.emit('miss', key);
      const started = nowMs();
      const built = await joined.finally(() => (trace.waitMs = nowMs() - started));
      trace.built = false;
      const { value, asOf } = built!;
      if (asOf >= asked) return { value: value as Awaited<T>, status: 'miss', asOf };
      // This call may have begun after a write that replaced the build's value: it looks again.
      if (retries > 0) return this.lookup(call, trace, undefined, retries - 1);
      const madeAsOf = moment();
      const [made] = timedOf(await factory(), settings);
      const own = this.entries.codec.roundTrip(key, made, settings);
      return { value: own as Awaited<T>, status: 'miss', asOf: madeAsOf };
    }
    // A lock seen held is waited for before the first try: its build is running.
    const context = { lockHeld, claimed, failSafe };
    const building = this.builds.startPromise(lockKey, () =>
      this.builder.build(key, lockKey, factory, settings, 'wait', trace, context),
    );
    if (!failSafe) this.emit('miss', key);
    const { value, asOf } = (await building)!;
    return { value: value as Awaited<T>, status: 'miss', asOf };
  }

  /** A fresh entry's answer; it may start the early refresh (`lockKey` is made then if not given). */
  private hit<T>(
    key: string,
    lockKey: string | undefined,
    entry: CacheEntry,
    factory: () => T | Promise<T>,
    settings: CacheSettings,
    asOf: number,
  ): CacheLookup<Awaited<T>> {
    this.emit('hit', key);
    const now = this.now();
    if (refreshesEarly(entry, now, settings)) {
      lockKey ??= this.lockKeyOf(key);
      void this.builder.refresh(key, lockKey, factory, settings, entry.freshUntil);
    }
    return { value: entry.value as Awaited<T>, status: 'hit', asOf };
  }

  private lockKeyOf(key: string): string {
    return this.lockKeys.of(key);
  }
}
