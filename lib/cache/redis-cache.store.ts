import type { RedisScriptClient } from '../types/clients.js';
import { deleteKey, getValue, setValue } from '../redis/plain-commands.js';
import type { BufferCacheStore } from './cache-store.js';

/**
 * The default store: entries on the lock's own Redis client, each key in its lock's hash slot (so
 * that a build writes its entry, releases its lock and wakes its waiters in one script).
 *
 * @example
 * ```ts
 * const store = new RedisCacheStore(() => lock.getClient());
 * await store.set(storeKey, text, 60_000);
 * ```
 */
export class RedisCacheStore implements BufferCacheStore {
  /** The lock's client once it was had: a hit then costs no step to reach it. */
  private had: RedisScriptClient | undefined;

  constructor(private readonly client: () => Promise<RedisScriptClient>) {}

  get(key: string): Promise<string | null> {
    const had = this.had;
    if (had) return getValue(had, key);
    return this.client().then((client) => getValue((this.had = client), key));
  }

  async set(key: string, value: string, ttlMs: number): Promise<unknown> {
    return setValue(await this.client(), key, value, ttlMs);
  }

  async delete(key: string): Promise<unknown> {
    return deleteKey(await this.client(), key);
  }
}
