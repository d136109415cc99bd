import { deleteKey, getValue, getValueOrPttl, setValue } from '../redis/plain-commands.js';
import { hasMethods } from '../options/rules.js';
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

/** A cache-manager `Cache` (it has `del`, and TTLs in ms) is adapted; Keyv is used as it is. */
export function cacheStoreOf(cache: object): BufferCacheStore {
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
