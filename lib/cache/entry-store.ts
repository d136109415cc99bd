import { LockError } from '../errors/lock.error.js';
import { claimOnce, type LockGuard } from '../lock/lock-results.js';
import { ACQUIRE_UNLESS_FOUND, RELEASE_WRITING } from '../lock/redis-lock.service.js';
import { errorText } from '../messages/error-text.js';
import type { CacheSettings } from '../options/cache.options.js';
import { entryAndClaim, slotKey } from '../redis/keys.js';
import { carriedPayload, claimLock } from '../redis/lock-commands.js';
import { JSON_RESULT_SERIALIZER } from '../serialization/result-serializer.js';
import type { RedisScriptClient } from '../types/clients.js';
import { lockChannel } from '../telemetry/channels.js';
import { moment } from './moment.js';
import type { CacheParts } from './cache-parts.js';
import { ownStore, RedisCacheStore, type BufferCacheStore } from './cache-store.js';
import { EntryCodec, ttlMsOf, type CacheEntry } from './entry-codec.js';
import { cacheWriter, type CacheWriter } from './cache-writer.js';
import { CopyAnnouncer } from './copy-announcer.js';
import { InvalidationBus } from './invalidation-bus.js';
import { LocalTier } from './local-tier.js';
import { outdatingWrite, writeFailed } from './outdating-write.js';
import { RefusedDeletes } from './refused-deletes.js';
import { DEFAULT_TRUST_SECONDS, TagVersions, type TagStamp } from './tag-versions.js';

export type { CacheEntry } from './entry-codec.js';

/**
 * A lookup's entry; on a miss in the built-in store, whether the key's lock was held then, or the
 * lock itself when the lookup took it: `claim()` gives it once, to the caller that builds.
 */
export interface Found {
  readonly entry: CacheEntry | undefined;
  readonly lockHeld: boolean;
  /** When the store's answer came (`moment()`): a call that began later does not take it. */
  readonly readAt: number;
  readonly claim?: () => LockGuard | undefined;
}

/**
 * A build's release: its failure; `written`: the store has the entry and the release found no
 * write of the key after the build began; `outdated`: it found one, and nothing was stored.
 */
export interface Released {
  readonly error: LockError | undefined;
  readonly written: boolean;
  readonly outdated: boolean;
}

/**
 * The entries in their store; a failing store is a miss, logged. On the built-in store an entry
 * lives in its lock key's hash slot, so that one script writes it and releases the lock.
 */
export class EntryStore {
  private readonly store: BufferCacheStore;
  private readonly builtIn: boolean;
  readonly codec: EntryCodec;
  private readonly reading = new Map<string, Promise<Found>>();
  private readonly bus: InvalidationBus;
  private readonly tier: LocalTier<CacheEntry> | undefined;
  private readonly tags: TagVersions;
  private readonly copies: CopyAnnouncer;
  private readonly writer: CacheWriter;
  private readonly refused: RefusedDeletes;

  constructor(
    private readonly parts: CacheParts,
    cache: object | undefined,
  ) {
    const { lock, options, now, messages } = parts;
    const client = (): Promise<RedisScriptClient> => lock.getClient();
    this.store = cache
      ? ownStore(cache, options.storeTimeout, messages)
      : new RedisCacheStore(client);
    this.builtIn = this.store instanceof RedisCacheStore;
    this.refused = new RefusedDeletes(this.store, now, (error) => this.storeFailed(error));
    const serializer = options.serializer ?? JSON_RESULT_SERIALIZER;
    this.codec = new EntryCodec({ serializer, messages, log: parts.log, now });
    const prefix = options.cachePrefix;
    const bus = (this.bus = new InvalidationBus({
      channel: `${prefix}{nestjs-buffer-lock}:l1`,
      client,
    }));
    const l1 = options.l1;
    if (l1) this.tier = new LocalTier(bus, l1);
    this.copies = new CopyAnnouncer(bus, this.tier, parts);
    const trustMs = (l1 ? l1.maxAge : DEFAULT_TRUST_SECONDS) * 1000;
    const writer = (this.writer = cacheWriter(client, options.writeReplicas, messages));
    this.tags = new TagVersions({ bus, client, writer, prefix, now, trustMs });
  }

  /** Whether a write may keep a copy in this process (the module has `l1`). */
  get keepsCopies(): boolean {
    return this.tier !== undefined;
  }

  /** This process's copy of `key` while it may be served (`l1`), else `undefined`. */
  local(key: string): CacheEntry | undefined {
    const entry = this.tier?.get(key, this.parts.now());
    // A copy whose tags cannot be checked here is read again, and checked there.
    return entry?.tags && this.tags.check(entry.tags) !== true ? undefined : entry;
  }

  /** The versions of `tags` to build an entry with; `undefined` when they cannot be read (logged). */
  async stamps(tags: readonly string[]): Promise<readonly TagStamp[] | undefined> {
    return this.guarded(() => this.versions(tags));
  }

  /**
   * The versions of `tags` to write an entry with. When they cannot be read, the entry it would
   * replace is deleted instead (nothing is stored that its tags could not invalidate), and the
   * write rejects as a refused one does.
   */
  async stampsForWrite(
    key: string,
    lockKey: string,
    tags: readonly string[],
  ): Promise<readonly TagStamp[]> {
    try {
      return await this.versions(tags);
    } catch (error) {
      await this.delete(key, lockKey);
      writeFailed(this.parts.messages, error);
    }
  }

  private async versions(tags: readonly string[]): Promise<readonly TagStamp[]> {
    return tags.length === 0 ? [] : this.tags.current(tags);
  }

  /** Every entry that carries one of `tags` is a miss from now on, in every process. */
  async deleteByTag(tags: readonly string[]): Promise<void> {
    await this.tags.bump(tags);
    this.reading.clear();
  }

  /**
   * Overlapping lookups of one key share one store read: a hot key is one read per round trip. On
   * the built-in store, a miss reads its lock's state in the same script; with `lockTtl` (seconds)
   * it takes the lock when it is free, unless the lock's acquires are traced (then each is its own
   * step). With `keep`, the entry found is kept in `l1`.
   */
  lookup(key: string, lockKey: string, lockTtl?: number, keep = false): Promise<Found> {
    const storeKey = this.keyOf(key, lockKey);
    const running = this.reading.get(storeKey);
    if (running) return running;
    const tier = keep ? this.tier : undefined;
    const mark = tier ? this.bus.mark() : undefined;
    const answer = !this.builtIn
      ? this.stored(key, lockKey).then((entry) => ({ entry, lockHeld: false, readAt: moment() }))
      : lockTtl === undefined || lockChannel.hasSubscribers
        ? this.lookupWithLock(key, storeKey, lockKey)
        : this.lookupTaking(key, storeKey, lockKey, lockTtl);
    const read = answer.then(async (found) => {
      const entry = found.entry?.tags ? await this.checked(found.entry) : found.entry;
      if (entry) tier?.put(key, entry, mark, this.parts.now());
      return entry === found.entry ? found : { ...found, entry };
    });
    this.reading.set(storeKey, read);
    // Joined until the store answers (its tags may take a read more): a later call reads anew.
    const forget = (): void => {
      if (this.reading.get(storeKey) === read) this.reading.delete(storeKey);
    };
    void answer.then(forget, forget);
    return read;
  }

  /**
   * A read of its own: under the lock, an older overlapping read may miss a newer write. An entry
   * `carried` by a release's wake-up (its text) is taken from there, with no store read.
   */
  async read(key: string, lockKey: string, carried?: string): Promise<CacheEntry | undefined> {
    return this.checked(await this.stored(key, lockKey, carried));
  }

  /** The entry as the store has it; rejects when the store cannot be read (no proof of absence). */
  async readOrFail(key: string, lockKey: string): Promise<CacheEntry | undefined> {
    return this.checked(await this.stored(key, lockKey, undefined, true));
  }

  /** Whether `stamps` are still their tags' versions (with `read`, as Redis has them now). */
  async hold(stamps: readonly TagStamp[], read = false): Promise<boolean> {
    return (await this.guarded(() => this.tags.verify(stamps, read))) ?? false;
  }

  /** The entry, unless a tag it carries has a new version since it was built. */
  private async checked(entry: CacheEntry | undefined): Promise<CacheEntry | undefined> {
    if (!entry?.tags) return entry;
    // Versions that cannot be read cannot vouch for it: a miss, as a failed read is.
    return (this.tags.check(entry.tags) ?? (await this.hold(entry.tags))) ? entry : undefined;
  }

  private async stored(
    key: string,
    lockKey: string,
    carried?: string,
    strict = false,
  ): Promise<CacheEntry | undefined> {
    const text = carriedPayload(carried, 'entry');
    if (text !== undefined) {
      try {
        return this.codec.decode(text, key);
      } catch {
        // Unreadable here as in the store: read it, and say so there.
      }
    }
    const storeKey = this.keyOf(key, lockKey);
    // An outdated build's value that the store would not delete yet: a miss here.
    if (this.refused.has(storeKey)) return undefined;
    const read = strict
      ? await this.store.get(storeKey)
      : await this.guarded(() => this.store.get(storeKey));
    return this.codec.stored(read, key);
  }

  private async lookupWithLock(key: string, storeKey: string, lockKey: string): Promise<Found> {
    const store = this.store as RedisCacheStore;
    const answer = await this.guarded(() => store.lookup(storeKey, lockKey));
    // PTTL: -2 when the lock is free, -1 (no expiry) or more when it is held.
    const readAt = moment();
    if (typeof answer === 'number') return { entry: undefined, lockHeld: answer >= -1, readAt };
    return { entry: this.codec.stored(answer, key), lockHeld: false, readAt };
  }

  private async lookupTaking(
    key: string,
    storeKey: string,
    lockKey: string,
    lockTtl: number,
  ): Promise<Found> {
    const found = entryAndClaim(storeKey, this.parts.options.cachePrefix);
    const answer = await this.parts.lock[ACQUIRE_UNLESS_FOUND](lockKey, found, lockTtl);
    const readAt = moment();
    if ('found' in answer) {
      return { entry: this.codec.stored(answer.found, key), lockHeld: false, readAt };
    }
    const [guard, error] = answer;
    // As a failed read: a miss, logged; the build's own acquire meets the trouble again.
    if (error) this.storeFailed(error.cause ?? error);
    return guard
      ? { entry: undefined, lockHeld: false, readAt, claim: claimOnce(guard) }
      : { entry: undefined, lockHeld: !error, readAt };
  }

  /**
   * Writes the entry; every `l1` drops its copy, and this one keeps `kept` (its decoded value)
   * when the store took it and nothing was heard since before the write. It outdates the build in
   * flight on the key (its release then stores nothing); rejects when the store refuses it.
   */
  write(
    key: string,
    lockKey: string,
    text: string,
    settings: CacheSettings,
    kept?: CacheEntry,
  ): Promise<void> {
    return this.replace(key, lockKey, text, ttlMsOf(settings), kept);
  }

  /** Deletes the entry and outdates the build in flight on the key, if any. */
  delete(key: string, lockKey: string): Promise<void> {
    return this.replace(key, lockKey, undefined, 0);
  }

  private async replace(
    key: string,
    lockKey: string,
    text: string | undefined,
    ttlMs: number,
    kept?: CacheEntry,
  ): Promise<void> {
    const storeKey = this.keyOf(key, lockKey);
    const before = this.tier ? this.bus.mark() : undefined;
    const own = this.builtIn ? undefined : this.store;
    let failure: unknown;
    await outdatingWrite(this.writer, own, lockKey, storeKey, text, ttlMs).catch(
      (error: unknown) => {
        failure = error;
      },
    );
    // A read under way began before this write: a lookup after it reads again.
    this.reading.delete(storeKey);
    if (failure === undefined) this.refused.settled(storeKey);
    await this.copies.announced(key, failure === undefined ? kept : undefined, before);
    if (failure !== undefined) writeFailed(this.parts.messages, failure);
  }

  /** Releases the build's lock and its claim, storing nothing. */
  async release(guard: LockGuard): Promise<LockError | undefined> {
    const write = { prefix: undefined, payload: undefined, ttlMs: 0, claimed: true };
    return (await this.parts.lock[RELEASE_WRITING](guard, write))[1];
  }

  /** Claims the build's lock before its factory runs; unclaimed, its entry is not stored. */
  async claim(guard: LockGuard): Promise<void> {
    const { lock } = this.parts;
    await this.guarded(async () => claimLock(await lock.getClient(), guard.key, guard.token));
  }

  /**
   * Writes the entry (when one was built) and releases the lock, whose wake-up carries the entry:
   * one script on the built-in store. On another store the entry is written first, and deleted
   * again unless the release confirms it: a write of the key may have come after the build began
   * (or its lock was lost, or the release's answer was).
   */
  async writeAndRelease(
    guard: LockGuard,
    key: string,
    text: string | undefined,
    settings: CacheSettings,
  ): Promise<Released> {
    const { lock, options } = this.parts;
    if (text === undefined)
      return { error: await this.release(guard), written: false, outdated: false };
    const storeKey = this.keyOf(key, guard.key);
    const setting = async (): Promise<true> => {
      await this.store.set(storeKey, text, ttlMsOf(settings));
      return true;
    };
    const stored = this.builtIn || ((await this.guarded(setting)) ?? false);
    const prefix = this.builtIn ? options.cachePrefix : undefined;
    const ttlMs = ttlMsOf(settings);
    const write = { prefix, payload: text, ttlMs, carried: 'entry' as const, claimed: true };
    const [confirmed, error] = await lock[RELEASE_WRITING](guard, write);
    if (confirmed) this.refused.settled(storeKey);
    else if (!this.builtIn) await this.refused.delete(storeKey, this.parts.now() + ttlMs);
    await this.copies.announced(key);
    return { error, written: confirmed && stored, outdated: !confirmed && !error };
  }

  private keyOf(key: string, lockKey: string): string {
    const { cachePrefix } = this.parts.options;
    return this.builtIn ? slotKey(lockKey, cachePrefix) : cachePrefix + key;
  }

  /** The call's answer; `undefined` when it failed (logged). */
  private async guarded<T>(call: () => T | Promise<T>): Promise<T | undefined> {
    try {
      return await call();
    } catch (error) {
      this.storeFailed(error);
      return undefined;
    }
  }

  private storeFailed(error: unknown): void {
    const { messages, log } = this.parts;
    const line = messages.render('cache_store_failed', { ERROR: errorText(error) });
    log.error('cache_store_failed', line);
  }
}
