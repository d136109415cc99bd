import { hasMethods } from '../options/rules.js';

/**
 * Where the cache keeps its entries. Values are text (the entry, serialized by the module's
 * serializer); `ttlMs` is how long the store may keep one. Keyv fits as it is; implement it to
 * put entries anywhere else.
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

/** The part of a cache-manager 6/7 `Cache` the adapter uses (its TTLs are milliseconds). */
interface CacheManagerLike {
  get(key: string): Promise<unknown>;
  set(key: string, value: unknown, ttl?: number): Promise<unknown>;
  del(key: string): Promise<unknown>;
}

/**
 * The store for the module's `cache` option, picked by shape: a cache-manager `Cache` (it has
 * `del`) is adapted; a Keyv instance or any `BufferCacheStore` is used as it is.
 *
 * @example
 * ```ts
 * const store = cacheStoreOf(cacheManager); // a cache-manager `Cache`: `delete` calls its `del`
 * await store.set('report:1', text, 60_000);
 * ```
 */
export function cacheStoreOf(cache: object): BufferCacheStore {
  if (hasMethods('get', 'set', 'del')(cache) && !hasMethods('delete')(cache)) {
    const manager = cache as CacheManagerLike;
    return {
      get: (key) => manager.get(key),
      set: (key, value, ttlMs) => manager.set(key, value, ttlMs),
      delete: (key) => manager.del(key),
    };
  }
  return cache as BufferCacheStore;
}
