import { LockError } from '../errors/lock.error.js';
import type { LockGuard } from '../lock/lock-results.js';
import { RELEASE_WRITING, type RedisLockService } from '../lock/redis-lock.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { toMilliseconds } from '../options/seconds.js';
import { slotKey } from '../redis/keys.js';
import type { ResultSerializer } from '../serialization/result-serializer.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';
import { decodeEntry, encodeEntry, type CacheEntry } from './cache-entry.js';
import type { CacheSettings } from '../options/cache.options.js';
import { cacheStoreOf, type BufferCacheStore } from './cache-store.js';
import { RedisCacheStore } from './redis-cache.store.js';
import { errorText } from '../messages/error-text.js';

/**
 * What an {@link EntryStore} works with.
 *
 * @example
 * ```ts
 * const parts: EntryStoreParts = { lock, cache: keyv, prefix, serializer, messages, log, now };
 * ```
 */
export interface EntryStoreParts {
  readonly lock: RedisLockService;
  /** The module's `cache`: a cache-manager `Cache`, a Keyv, a `BufferCacheStore`; or the built-in. */
  readonly cache: object | undefined;
  readonly prefix: string;
  readonly serializer: ResultSerializer;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly now: () => number;
}

/**
 * The cache's entries in their store: where each lives, how it is written and read, and what a
 * failing store means (a miss, logged once per interval). On the built-in store an entry lives
 * in its lock key's hash slot, so that a build writes it and releases the lock in one script.
 *
 * @example
 * ```ts
 * const entries = new EntryStore({ lock, cache: keyv, prefix, serializer, messages, log, now });
 * const text = entries.encode(key, report, settings);
 * await entries.write(key, lock.redisKey(key), text, settings);
 * const entry = await entries.lookup(key, lock.redisKey(key));
 * ```
 */
export class EntryStore {
  private readonly store: BufferCacheStore;
  private readonly builtIn: boolean;
  /** Lookups in progress, by store key: concurrent lookups of one key share one store read. */
  private readonly reading = new Map<string, Promise<CacheEntry | undefined>>();

  constructor(private readonly parts: EntryStoreParts) {
    const { cache, lock } = parts;
    this.store = cache ? cacheStoreOf(cache) : new RedisCacheStore(() => lock.getClient());
    this.builtIn = this.store instanceof RedisCacheStore;
  }

  /**
   * The entry of `key` for a lookup. Lookups of one key that overlap share one store read (and
   * its entry): a hot key costs one read per round trip, not one per caller.
   */
  lookup(key: string, lockKey: string): Promise<CacheEntry | undefined> {
    const storeKey = this.keyOf(key, lockKey);
    const running = this.reading.get(storeKey);
    if (running) return running;
    const read = this.read(key, lockKey);
    this.reading.set(storeKey, read);
    const forget = (): void => void this.reading.delete(storeKey);
    void read.then(forget, forget);
    return read;
  }

  /**
   * The entry of `key` as the store has it now (a read of its own: under the lock, an overlapping
   * older read could miss what another worker just wrote), or `undefined` when it is missing,
   * unreadable, or the store failed (logged).
   */
  async read(key: string, lockKey: string): Promise<CacheEntry | undefined> {
    const text = await this.guarded(() => this.store.get(this.keyOf(key, lockKey)));
    if (text === undefined || text === null) return undefined;
    try {
      return decodeEntry(this.parts.serializer, text);
    } catch (error) {
      const { messages, log } = this.parts;
      const line = messages.render('cache_entry_unreadable', { ERROR: errorText(error) });
      log.warn('cache_entry_unreadable', line);
      return undefined;
    }
  }

  /**
   * The text of a fresh entry for `value`. Throws the catalog's `cache_value_unserializable`
   * error for a value the serializer cannot represent.
   */
  encode(key: string, value: unknown, settings: CacheSettings): string {
    const freshUntil = this.parts.now() + toMilliseconds(settings.ttl);
    const staleUntil = freshUntil + settings.grace * 1000;
    const { serializer, messages } = this.parts;
    return encodeEntry(serializer, messages, key, { value, freshUntil, staleUntil });
  }

  /** Writes an encoded entry (a failing store is logged). */
  async write(key: string, lockKey: string, text: string, settings: CacheSettings): Promise<void> {
    const storeKey = this.keyOf(key, lockKey);
    await this.guarded(() => this.store.set(storeKey, text, ttlMsOf(settings)));
  }

  async delete(key: string, lockKey: string): Promise<void> {
    await this.guarded(() => this.store.delete(this.keyOf(key, lockKey)));
  }

  /** Writes the entry (when one was built) and releases the lock: one script on the built-in store. */
  async writeAndRelease(
    guard: LockGuard,
    key: string,
    text: string | undefined,
    settings: CacheSettings,
  ): Promise<LockError | undefined> {
    const { lock, prefix } = this.parts;
    if (text !== undefined && this.builtIn) {
      const write = { prefix, payload: text, ttlMs: ttlMsOf(settings) };
      const [, error] = await lock[RELEASE_WRITING](guard, write);
      return error;
    }
    if (text !== undefined) await this.write(key, guard.key, text, settings);
    const [, error] = await lock.release(guard);
    return error;
  }

  /** Built-in store: the prefix, then the lock key's slot tag. Another store: the key itself. */
  private keyOf(key: string, lockKey: string): string {
    return this.builtIn ? slotKey(lockKey, this.parts.prefix) : key;
  }

  /** A store call whose failure is logged (rate limited) and read as "nothing there". */
  private async guarded(call: () => unknown): Promise<unknown> {
    try {
      return await call();
    } catch (error) {
      const { messages, log } = this.parts;
      log.error(
        'cache_store_failed',
        messages.render('cache_store_failed', { ERROR: errorText(error) }),
      );
      return undefined;
    }
  }
}

/** How long the store keeps an entry: fresh, then servable stale. */
const ttlMsOf = (settings: CacheSettings): number => toMilliseconds(settings.ttl + settings.grace);
