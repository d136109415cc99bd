import { deleteKey, getValue, getValueOrPttl, setValue } from '../redis/plain-commands.js';
import { LockError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { hasMethods } from '../options/rules.js';
import { within } from '../options/seconds.js';
import type { RedisScriptClient } from '../types/clients.js';

/**
 * Where the cache keeps its entries: text values, kept `ttlMs` at most. Keyv fits as it is;
 * implement it to put entries anywhere else.
 *
 * @example
 * ```ts
 * const store: BufferCacheStore = {
 *   get: (key) => db.get(key),
 *   set: (key, value, ttlMs) => db.set(key, value, { px: ttlMs }),
 *   delete: (key) => db.del(key),
 * };
 * ```
 */
export interface BufferCacheStore {
  get(key: string): Promise<unknown> | unknown;
  set(key: string, value: string, ttlMs: number): Promise<unknown> | unknown;
  delete(key: string): Promise<unknown> | unknown;
}

/** A store that reports failures by an `'error'` event (Keyv). */
type Reporting = BufferCacheStore & {
  on(event: 'error', listener: (error: unknown) => void): unknown;
};

/** A store of the user's as the cache uses it: adapted, its failures heard, each call bounded. */
export function ownStore(
  cache: object,
  seconds: number,
  messages: BufferLockMessages,
): BufferCacheStore {
  return boundedStore(cacheStoreOf(cache), seconds, () => {
    const text = messages.render('cache_store_timeout', { SECONDS: seconds });
    return new LockError('cache_store_timeout', text);
  });
}

/** A cache-manager `Cache` (it has `del`, and TTLs in ms) is adapted; a Keyv (it has `on`) is heard. */
function cacheStoreOf(cache: object): BufferCacheStore {
  if (hasMethods('get', 'set', 'delete', 'on')(cache)) return failingLoudly(cache as Reporting);
  if (!hasMethods('get', 'set', 'del')(cache) || hasMethods('delete')(cache)) {
    return cache as BufferCacheStore;
  }
  const manager = cache as BufferCacheStore & { del(key: string): unknown };
  return {
    get: (key) => manager.get(key),
    set: (key, value, ttlMs) => manager.set(key, value, ttlMs),
    delete: (key) => manager.del(key),
  };
}

/**
 * Unless `throwOnErrors`, a Keyv resolves a failed write as `false`, and says why only with its
 * `'error'` event: a write during which one is heard rejects with it, so that a delete that did not
 * happen is not taken as done (an error of another call heard meanwhile fails it too: a failure
 * more, never a write less).
 */
function failingLoudly(store: Reporting): BufferCacheStore {
  let heard = 0;
  let last: unknown;
  store.on('error', (error) => {
    heard++;
    last = error;
  });
  const checked = async (write: () => unknown): Promise<unknown> => {
    const before = heard;
    const result = await write();
    if (heard !== before) throw last instanceof Error ? last : new Error(String(last));
    return result;
  };
  return {
    get: (key) => store.get(key),
    set: (key, value, ttlMs) => checked(() => store.set(key, value, ttlMs)),
    delete: (key) => checked(() => store.delete(key)),
  };
}

/**
 * Each call of `store` ends within `seconds`, or rejects with `late()`'s error: a client that
 * never answers holds no caller. A `set` past it is followed by a delete of its key once it ends,
 * so that a write that lands later is undone.
 */
function boundedStore(
  store: BufferCacheStore,
  seconds: number,
  late: () => Error,
): BufferCacheStore {
  const bounded = (call: () => unknown, undo?: () => unknown): Promise<unknown> => {
    const work = Promise.resolve().then(call);
    return within(work, seconds, () => {
      // Once it is done, whichever way: a store need not keep one client's order.
      if (undo) void work.then(undo, undo).catch(() => undefined);
      throw late();
    });
  };
  return {
    get: (key) => bounded(() => store.get(key)),
    set: (key, value, ttlMs) =>
      bounded(
        () => store.set(key, value, ttlMs),
        () => store.delete(key),
      ),
    delete: (key) => bounded(() => store.delete(key)),
  };
}

/** The default store: the lock's own client (keys in the lock's hash slot, see EntryStore). */
export class RedisCacheStore implements BufferCacheStore {
  // Kept once had, so that a hit reads without waiting a turn for the client.
  private had: RedisScriptClient | undefined;

  constructor(private readonly client: () => Promise<RedisScriptClient>) {}

  get(key: string): Promise<string | null> {
    if (this.had) return getValue(this.had, key);
    return this.client().then((client) => getValue((this.had = client), key));
  }

  /** The entry's text, or when there is none the PTTL of `lockKey`, in one script. */
  lookup(key: string, lockKey: string): Promise<string | number | null> {
    if (this.had) return getValueOrPttl(this.had, key, lockKey);
    return this.client().then((client) => getValueOrPttl((this.had = client), key, lockKey));
  }

  async set(key: string, value: string, ttlMs: number): Promise<unknown> {
    return setValue(await this.client(), key, value, ttlMs);
  }

  async delete(key: string): Promise<unknown> {
    return deleteKey(await this.client(), key);
  }
}
