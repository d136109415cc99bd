import { LockError } from '../errors/lock.error.js';
import type { LockGuard } from '../lock/lock-results.js';
import {
  ACQUIRE_UNLESS_FOUND,
  RELEASE_WRITING,
  type RedisLockService,
} from '../lock/redis-lock.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { CacheSettings } from '../options/cache.options.js';
import { toMilliseconds } from '../options/seconds.js';
import { slotKey } from '../redis/keys.js';
import { carriedPayload } from '../redis/lock-commands.js';
import type { FlightOptions } from '../options/buffer-lock.options.js';
import {
  JSON_RESULT_SERIALIZER,
  UnserializableValueError,
  type ResultSerializer,
} from '../serialization/result-serializer.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';
import type { RedisScriptClient } from '../types/clients.js';
import { lockChannel } from '../telemetry/channels.js';
import { cacheStoreOf, RedisCacheStore, type BufferCacheStore } from './cache-store.js';
import { InvalidationBus } from './invalidation-bus.js';
import { LocalTier } from './local-tier.js';
import { TAG_KEEP_MS, TagVersions, type TagStamp } from './tag-versions.js';

/** One cached value: fresh until `freshUntil`, servable stale until `staleUntil` (epoch ms). */
export interface CacheEntry {
  readonly value: unknown;
  readonly freshUntil: number;
  readonly staleUntil: number;
  /** How long its build took, for `earlyRefresh`; `0` for a `set()`. */
  readonly deltaMs: number;
  /** The versions of its tags when it was built; none when it has no tags. */
  readonly tags?: readonly TagStamp[];
}

/**
 * A lookup's entry; on a miss in the built-in store, whether the key's lock was held then, or the
 * lock itself when the lookup took it: `claim()` gives it once, to the caller that builds.
 */
export interface Found {
  readonly entry: CacheEntry | undefined;
  readonly lockHeld: boolean;
  readonly claim?: () => LockGuard | undefined;
}

/** What the cache's parts share. */
export interface CacheParts {
  readonly lock: RedisLockService;
  readonly options: FlightOptions;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly now: () => number;
}

/**
 * The entries in their store; a failing store is a miss, logged. On the built-in store an entry
 * lives in its lock key's hash slot, so that one script writes it and releases the lock.
 */
export class EntryStore {
  private readonly store: BufferCacheStore;
  private readonly builtIn: boolean;
  private readonly serializer: ResultSerializer;
  private readonly reading = new Map<string, Promise<Found>>();
  private readonly bus: InvalidationBus;
  /** The module's `l1`, if it has one. */
  private readonly tier: LocalTier<CacheEntry> | undefined;
  private readonly tags: TagVersions;

  constructor(
    private readonly parts: CacheParts,
    cache: object | undefined,
  ) {
    const { lock, options, now } = parts;
    this.store = cache ? cacheStoreOf(cache) : new RedisCacheStore(() => lock.getClient());
    this.builtIn = this.store instanceof RedisCacheStore;
    this.serializer = options.serializer ?? JSON_RESULT_SERIALIZER;
    const client = (): Promise<RedisScriptClient> => lock.getClient();
    const prefix = options.cachePrefix;
    const bus = (this.bus = new InvalidationBus({
      channel: `${prefix}{nestjs-buffer-lock}:l1`,
      client,
    }));
    const l1 = options.l1;
    if (l1) this.tier = new LocalTier(bus, l1);
    const trustMs = (l1 ? l1.maxAge : DEFAULT_TRUST_SECONDS) * 1000;
    this.tags = new TagVersions({ bus, client, prefix, now, trustMs });
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
    if (tags.length === 0) return [];
    try {
      return await this.tags.current(tags);
    } catch (error) {
      this.storeFailed(error);
      return undefined;
    }
  }

  /** Every entry that carries one of `tags` is a miss from now on, in every process. */
  deleteByTag(tags: readonly string[]): Promise<void> {
    return this.tags.bump(tags);
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
    let read = !this.builtIn
      ? this.stored(key, lockKey).then((entry) => ({ entry, lockHeld: false }))
      : lockTtl === undefined || lockChannel.hasSubscribers
        ? this.lookupWithLock(storeKey, lockKey)
        : this.lookupTaking(storeKey, lockKey, lockTtl);
    read = read.then(async (found) => {
      const entry = found.entry?.tags ? await this.checked(found.entry) : found.entry;
      if (entry) tier?.put(key, entry, mark, this.parts.now());
      return entry === found.entry ? found : { ...found, entry };
    });
    this.reading.set(storeKey, read);
    const forget = (): void => void this.reading.delete(storeKey);
    void read.then(forget, forget);
    return read;
  }

  /**
   * A read of its own: under the lock, an older overlapping read may miss a newer write. An entry
   * `carried` by a release's wake-up (its text) is taken from there, with no store read.
   */
  async read(key: string, lockKey: string, carried?: string): Promise<CacheEntry | undefined> {
    return this.checked(await this.stored(key, lockKey, carried));
  }

  /** The entry, unless a tag it carries has a new version since it was built. */
  private async checked(entry: CacheEntry | undefined): Promise<CacheEntry | undefined> {
    if (!entry?.tags) return entry;
    try {
      const valid = this.tags.check(entry.tags) ?? (await this.tags.verify(entry.tags));
      return valid ? entry : undefined;
    } catch (error) {
      // Versions that cannot be read cannot vouch for it: a miss, as a failed read is.
      this.storeFailed(error);
      return undefined;
    }
  }

  private async stored(
    key: string,
    lockKey: string,
    carried?: string,
  ): Promise<CacheEntry | undefined> {
    const text = carriedPayload(carried, 'entry');
    if (text !== undefined) {
      try {
        return this.decode(text);
      } catch {
        // Unreadable here as in the store: read it, and say so there.
      }
    }
    return this.decoded(await this.guarded(() => this.store.get(this.keyOf(key, lockKey))));
  }

  private async lookupWithLock(storeKey: string, lockKey: string): Promise<Found> {
    const store = this.store as RedisCacheStore;
    const answer = await this.guarded(() => store.lookup(storeKey, lockKey));
    // PTTL: -2 when the lock is free, -1 (no expiry) or more when it is held.
    if (typeof answer === 'number') return { entry: undefined, lockHeld: answer >= -1 };
    return { entry: this.decoded(answer), lockHeld: false };
  }

  private async lookupTaking(storeKey: string, lockKey: string, lockTtl: number): Promise<Found> {
    const answer = await this.parts.lock[ACQUIRE_UNLESS_FOUND](lockKey, storeKey, lockTtl);
    if ('found' in answer) return { entry: this.decoded(answer.found), lockHeld: false };
    const [guard, error] = answer;
    if (error) {
      // As a failed read: a miss, logged; the build's own acquire meets the trouble again.
      this.storeFailed(error.cause ?? error);
      return { entry: undefined, lockHeld: false };
    }
    if (!guard) return { entry: undefined, lockHeld: true };
    let left: LockGuard | undefined = guard;
    const claim = (): LockGuard | undefined => {
      const taken = left;
      left = undefined;
      return taken;
    };
    return { entry: undefined, lockHeld: false, claim };
  }

  /** A stored text as an entry; an unreadable one is a miss, logged. */
  private decoded(stored: unknown): CacheEntry | undefined {
    if (stored === undefined || stored === null) return undefined;
    try {
      return this.decode(stored);
    } catch (error) {
      const { messages, log } = this.parts;
      const line = messages.render('cache_entry_unreadable', { ERROR: errorText(error) });
      log.warn('cache_entry_unreadable', line);
      return undefined;
    }
  }

  // `freshUntil:staleUntil:deltaMs:payload`: the serializer sees the user's value alone.
  encode(
    key: string,
    value: unknown,
    settings: CacheSettings,
    deltaMs = 0,
    stamps: readonly TagStamp[] = [],
  ): string {
    const { messages, now } = this.parts;
    let payload: string;
    try {
      payload = this.serializer.serialize(value);
    } catch (error) {
      const { what, path } =
        error instanceof UnserializableValueError
          ? error.problem
          : { what: errorText(error), path: '$' };
      const text = messages.render('cache_value_unserializable', {
        KEY: key,
        WHAT: what,
        PATH: path,
      });
      throw new LockError('cache_value_unserializable', text, { cause: error });
    }
    // A UTF-8 byte is at most 3 per UTF-16 unit: a short payload is not measured.
    const max = settings.maxValueBytes;
    const bytes = payload.length * 3 > max ? Buffer.byteLength(payload) : 0;
    if (bytes > max) {
      const text = messages.render('cache_value_too_large', { KEY: key, BYTES: bytes, MAX: max });
      throw new LockError('cache_value_too_large', text);
    }
    const freshUntil = now() + toMilliseconds(settings.ttl);
    const head = `${freshUntil}:${freshUntil + settings.grace * 1000}:${deltaMs}`;
    if (stamps.length === 0) return `${head}:${payload}`;
    const tags = JSON.stringify(stamps);
    return `${head};${tags.length}:${tags}${payload}`;
  }

  /**
   * Writes the entry; every `l1` drops its copy, and this one keeps `kept` (its decoded value)
   * when the store took it and nothing was heard since before the write.
   */
  async write(
    key: string,
    lockKey: string,
    text: string,
    settings: CacheSettings,
    kept?: CacheEntry,
  ): Promise<void> {
    const storeKey = this.keyOf(key, lockKey);
    const before = this.tier ? this.bus.mark() : undefined;
    let stored = true;
    try {
      await this.store.set(storeKey, text, ttlMsOf(settings));
    } catch (error) {
      stored = false;
      this.storeFailed(error);
    }
    await this.announced(key, stored ? kept : undefined, before);
  }

  async delete(key: string, lockKey: string): Promise<void> {
    await this.guarded(() => this.store.delete(this.keyOf(key, lockKey)));
    await this.announced(key);
  }

  /**
   * With `l1`: this process's copy of `key` is dropped and the other workers are told to drop
   * theirs; `kept` is kept if the only thing heard since `before` is this announcement (another
   * worker's write of the key, heard meanwhile, may have come after this one in the store).
   */
  private async announced(key: string, kept?: CacheEntry, before?: number): Promise<void> {
    const tier = this.tier;
    if (!tier) return;
    const published = this.bus.announceKey(key);
    try {
      await published;
    } catch (error) {
      const { messages, log, options } = this.parts;
      const seconds = options.l1 ? options.l1.maxAge : 0;
      const line = messages.render('l1_publish_failed', {
        ERROR: errorText(error),
        SECONDS: seconds,
      });
      log.warn('l1_publish_failed', line);
      return;
    }
    if (kept && before !== undefined) tier.put(key, kept, before + 1, this.parts.now());
  }
  /**
   * Writes the entry (when one was built) and releases the lock, whose wake-up carries the entry:
   * one script on the built-in store.
   */
  async writeAndRelease(
    guard: LockGuard,
    key: string,
    text: string | undefined,
    settings: CacheSettings,
  ): Promise<LockError | undefined> {
    const { lock, options } = this.parts;
    if (text === undefined) return (await lock.release(guard))[1];
    if (!this.builtIn) await this.write(key, guard.key, text, settings);
    const prefix = this.builtIn ? options.cachePrefix : undefined;
    const write = { prefix, payload: text, ttlMs: ttlMsOf(settings), carried: 'entry' as const };
    const [, error] = await lock[RELEASE_WRITING](guard, write);
    if (this.builtIn) await this.announced(key);
    return error;
  }

  // `freshUntil:staleUntil:deltaMs:payload`, or with tags `…:deltaMs;length:[[tag, version], …]payload`.
  decode(text: unknown): CacheEntry {
    const head = typeof text === 'string' ? ENTRY_HEAD.exec(text) : null;
    const [freshUntil, staleUntil, deltaMs] = (head ?? []).slice(1, 4).map(Number) as number[];
    if (!head || ![freshUntil, staleUntil, deltaMs].every(Number.isFinite)) {
      throw new TypeError('not a cache entry');
    }
    const body = (text as string).slice(head[0].length);
    const tagsLength = head[4] === undefined ? 0 : Number(head[4]);
    const tags = tagsLength > 0 ? stampsOf(body.slice(0, tagsLength)) : undefined;
    const value = this.serializer.deserialize(body.slice(tagsLength));
    const entry = { value, freshUntil: freshUntil!, staleUntil: staleUntil!, deltaMs: deltaMs! };
    return tags ? { ...entry, tags } : entry;
  }

  private keyOf(key: string, lockKey: string): string {
    const { cachePrefix } = this.parts.options;
    return this.builtIn ? slotKey(lockKey, cachePrefix) : cachePrefix + key;
  }

  private async guarded(call: () => unknown): Promise<unknown> {
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

/** How long the store keeps an entry: fresh, then servable stale; a tagged one, `TAG_KEEP_MS` at most. */
const ttlMsOf = (settings: CacheSettings): number => {
  const ms = toMilliseconds(settings.ttl + settings.grace);
  return settings.tags.length > 0 ? Math.min(ms, TAG_KEEP_MS) : ms;
};

const ENTRY_HEAD = /^([^:]+):([^:]+):([^:;]+)(?:;(\d+))?:/;

/** Seconds a tag version is trusted without `l1` (with it, its `maxAge`). */
const DEFAULT_TRUST_SECONDS = 5;

const isStamp = (s: unknown): boolean =>
  Array.isArray(s) && s.length === 2 && s.every((part) => typeof part === 'string');

function stampsOf(text: string): readonly TagStamp[] {
  const stamps: unknown = JSON.parse(text);
  if (!Array.isArray(stamps) || !stamps.every(isStamp)) throw new TypeError('not a cache entry');
  return stamps as TagStamp[];
}
