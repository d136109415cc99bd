import KeyvRedis from '@keyv/redis';
import type { Redis } from 'ioredis';
import Keyv from 'keyv';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  connectFailFast,
  RedisLockService,
  type BufferCacheStore,
} from '../../lib/index.js';
import { MemoryLogger, deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Once `delete`, `set` or `deleteByTag` has returned, no build that began before it stores its
 * value, and no call that began after it gets that value. A call that was already waiting for the
 * build may still get it: it asked first.
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const opened: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of opened.splice(0).toReversed()) await close().catch(() => undefined);
});

let n = 0;
const key = (): string => `row:${++n}`;

/** A cache as one worker process has it: its own client and lock, its entries in `store`. */
function worker(store?: object): BufferCache {
  const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:wins:' });
  return new BufferCache({ lock, store, options: { logger: new MemoryLogger() } });
}

/** A Keyv store on the same Redis, shared by the workers of a test. */
function keyvStore(): Keyv {
  const keyv = new Keyv({ store: new KeyvRedis(server.url), namespace: `wins${++n}` });
  opened.push(() => keyv.disconnect());
  return keyv;
}

/** A source of truth, and a factory that reads it, then holds its build until told. */
function slowSource(): {
  row: { version: number };
  factory: () => Promise<number>;
  read: Promise<void>;
  finish: () => void;
} {
  const row = { version: 1 };
  const read = deferred();
  const done = deferred();
  const factory = async (): Promise<number> => {
    const version = row.version;
    read.resolve();
    await done.promise;
    return version;
  };
  return { row, factory, read: read.promise, finish: () => done.resolve() };
}

const lockHeld = async (): Promise<boolean> =>
  (await admin.keys('test:wins:*')).some((k) => !k.includes('}'));

for (const where of ['the built-in store', 'a Keyv store'] as const) {
  const store = (): object | undefined => (where === 'a Keyv store' ? keyvStore() : undefined);
  describe(`on ${where}`, () => {
    it('delete() while a build is in flight: its value is not stored, the next call builds afresh', async () => {
      const shared = store();
      const [a, b] = [worker(shared), worker(shared)];
      const k = key();
      const source = slowSource();
      const building = a.getOrSet(k, source.factory);
      await source.read;
      source.row.version = 2;
      await b.delete(k);
      source.finish();
      // The caller that asked before the delete may have the value it asked for.
      expect(await building).toBe(1);
      expect(await b.get(k)).toBeUndefined();
      expect(await a.get(k)).toBeUndefined();
      expect(await b.getOrSet(k, () => source.row.version)).toBe(2);
      expect(await a.getOrSet(k, () => -1)).toBe(2);
    });

    it('delete() while a build is in flight, then every key but the lock evicted: the build still stores nothing', async () => {
      const shared = store();
      const [a, b] = [worker(shared), worker(shared)];
      const k = key();
      const source = slowSource();
      const building = a.getOrSet(k, source.factory);
      await source.read;
      await until(lockHeld);
      source.row.version = 2;
      await b.delete(k);
      // What Redis keeps for the lock's holder goes, as under maxmemory with allkeys-lru.
      for (const other of await admin.keys('*}*')) await admin.del(other);
      source.finish();
      expect(await building).toBe(1);
      expect(await b.get(k)).toBeUndefined();
      expect(await b.getOrSet(k, () => source.row.version)).toBe(2);
    });

    it('set() while a build is in flight: the value set stays, the build does not overwrite it', async () => {
      const shared = store();
      const [a, b] = [worker(shared), worker(shared)];
      const k = key();
      const source = slowSource();
      const building = a.getOrSet(k, source.factory);
      await source.read;
      source.row.version = 2;
      await b.set(k, 2);
      source.finish();
      expect(await building).toBe(1);
      const after = [await a.get(k), await b.get(k)];
      // On a store of its own the build deletes what it wrote: a miss there, never the old value.
      expect(after).toEqual(where === 'the built-in store' ? [2, 2] : [undefined, undefined]);
      expect(await a.getOrSet(k, () => source.row.version)).toBe(2);
      expect(await b.getOrSet(k, () => -1)).toBe(2);
    });

    it('a call that joins the build after the delete returned, in its process or another, gets the new value', async () => {
      const shared = store();
      const [a, b, c] = [worker(shared), worker(shared), worker(shared)];
      const k = key();
      const source = slowSource();
      const first = a.getOrSet(k, source.factory);
      await source.read;
      await until(lockHeld);
      source.row.version = 2;
      await b.delete(k);
      // Both start after the delete returned: one joins a's build, one waits on its lock.
      const joined = a.getOrSet(k, () => source.row.version);
      const waiting = c.getOrSet(k, () => source.row.version);
      source.finish();
      expect(await first).toBe(1);
      expect(await joined).toBe(2);
      expect(await waiting).toBe(2);
    });
  });
}

describe('deleteByTag while a build is in flight', () => {
  it('a call in the same process after deleteByTag() returned does not take the older build', async () => {
    const cache = worker();
    const k = key();
    const tags = [`tag-${++n}`];
    const source = slowSource();
    const first = cache.getOrSet(k, source.factory, { tags });
    await source.read;
    source.row.version = 2;
    await cache.deleteByTag(tags);
    const later = cache.getOrSet(k, () => source.row.version, { tags });
    source.finish();
    expect(await first).toBe(1);
    expect(await later).toBe(2);
    expect(await cache.getOrSet(k, () => -1, { tags })).toBe(2);
  });

  it('nor does a call in another process that joins its own older build', async () => {
    const [a, b] = [worker(), worker()];
    const k = key();
    const tags = [`tag-${++n}`];
    const source = slowSource();
    const first = a.getOrSet(k, source.factory, { tags });
    await source.read;
    source.row.version = 2;
    await b.deleteByTag(tags);
    const later = a.getOrSet(k, () => source.row.version, { tags });
    source.finish();
    expect(await first).toBe(1);
    expect(await later).toBe(2);
  });
});

describe('a failed refresh backs off refreshes only', () => {
  it('once the stale entry has expired, a miss builds at once in every worker', async () => {
    const [a, b] = [worker(), worker()];
    const k = key();
    const options = { ttl: 0.2, grace: 0.4, lockTimeout: 10 };
    await a.getOrSet(k, () => 'v1', options);
    await new Promise((resolve) => setTimeout(resolve, 250));
    // Stale: served at once, while the refresh fails and backs off (1 s).
    const failed = new Promise((resolve) => a.once('refresh-failed', resolve));
    expect(
      await a.getOrSet(
        k,
        () => {
          throw new Error('backend down');
        },
        options,
      ),
    ).toBe('v1');
    await failed;
    // Past grace: no entry to serve. Both misses run their factory now, not after the back-off.
    await new Promise((resolve) => setTimeout(resolve, 400));
    for (const cache of [a, b]) {
      const started = Date.now();
      const error = await cache
        .getOrSet(
          k,
          () => {
            throw new Error('still down');
          },
          options,
        )
        .catch((e: unknown) => e);
      expect((error as Error).message).toBe('still down');
      expect(Date.now() - started).toBeLessThan(500);
    }
    expect(await b.getOrSet(k, () => 'v2', options)).toBe('v2');
  });

  it('while the back-off lasts, another worker does not refresh the key', async () => {
    const [a, b] = [worker(), worker()];
    const k = key();
    const options = { ttl: 0.2, grace: 5 };
    await a.getOrSet(k, () => 'v1', options);
    await new Promise((resolve) => setTimeout(resolve, 250));
    const failed = new Promise((resolve) => a.once('refresh-failed', resolve));
    await a.getOrSet(
      k,
      () => {
        throw new Error('backend down');
      },
      options,
    );
    await failed;
    let refreshes = 0;
    expect(await b.getOrSet(k, () => ++refreshes, options)).toBe('v1');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(refreshes).toBe(0);
  });
});

/** A worker whose lock is on a Redis of its own, stopped by `stop`, with entries in `store`. */
async function fragileWorker(store: BufferCacheStore): Promise<{
  cache: BufferCache;
  stop: () => Promise<void>;
}> {
  const own = await startRedis();
  const lock = new RedisLockService({
    redis: () => connectFailFast(own.url),
    namespace: 'test:wins:fragile:',
  });
  const logger = new MemoryLogger();
  const cache = new BufferCache({ lock, store, options: { logger, circuitBreaker: false } });
  opened.push(() => own.stop());
  return { cache, stop: () => own.stop() };
}

function mapStore(): { store: BufferCacheStore; memory: Map<string, string> } {
  const memory = new Map<string, string>();
  const store: BufferCacheStore = {
    get: (k) => memory.get(k),
    set: (k, v) => void memory.set(k, v),
    delete: (k) => void memory.delete(k),
  };
  return { store, memory };
}

describe("a build whose lock's Redis fails before its release", () => {
  it('on a store of its own, what it wrote is deleted again: no release vouched for it', async () => {
    const { store, memory } = mapStore();
    const { cache, stop } = await fragileWorker(store);
    const k = key();
    const source = slowSource();
    const building = cache.getOrSet(k, source.factory);
    await source.read;
    await stop();
    source.finish();
    expect(await building).toBe(1);
    expect([...memory.keys()]).toEqual([]);
  });

  it('a call of its process that began after the factory did takes a build of its own', async () => {
    const { store } = mapStore();
    const { cache, stop } = await fragileWorker(store);
    const k = key();
    const source = slowSource();
    const first = cache.getOrSet(k, source.factory);
    await source.read;
    await stop();
    source.row.version = 2;
    // Asked after the first factory read the row: the value nothing vouched for may be older.
    const later = cache.getOrSet(k, () => source.row.version);
    source.finish();
    expect(await first).toBe(1);
    expect(await later).toBe(2);
  });
});

describe("a store of its own that refuses to delete an outdated build's value", () => {
  it('deletes it again once the store takes it, and meanwhile the worker reads the key as a miss', async () => {
    const { store, memory } = mapStore();
    let refusing = false;
    const fragile: BufferCacheStore = {
      ...store,
      delete: (k) => {
        if (refusing) throw new Error('store unavailable');
        return store.delete(k);
      },
    };
    const logger = new MemoryLogger();
    const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:wins:' });
    const a = new BufferCache({ lock, store: fragile, options: { logger } });
    const b = worker(fragile);
    const k = key();
    const source = slowSource();
    const building = a.getOrSet(k, source.factory, { ttl: 60 });
    await source.read;
    source.row.version = 2;
    await b.delete(k);
    refusing = true;
    source.finish();
    expect(await building).toBe(1);
    // The store still has the outdated value; this worker does not serve it.
    expect([...memory.values()]).toHaveLength(1);
    expect(await a.get(k)).toBeUndefined();
    expect(logger.at('error').join('\n')).toContain('store unavailable');
    refusing = false;
    // Tried again every 250 ms: gone within a second of the store taking deletes again.
    await until(() => memory.size === 0, 1000);
    expect(await b.get(k)).toBeUndefined();
    expect(await a.getOrSet(k, () => source.row.version)).toBe(2);
  });
});

describe('a Keyv store whose Redis is down', () => {
  it('delete() and set() reject with cache_write_failed, where Keyv itself resolves', async () => {
    const down = await startRedis();
    const keyv = new Keyv({
      store: new KeyvRedis({ url: down.url, socket: { reconnectStrategy: false } }),
      namespace: `down${++n}`,
    });
    keyv.on('error', () => undefined);
    const cache = worker(keyv);
    const k = key();
    await cache.set(k, 'kept');
    await down.stop();
    // Keyv reports the failure only by its 'error' event.
    expect(await keyv.delete('anything')).toBe(false);
    await expect(cache.delete(k)).rejects.toMatchObject({ code: 'cache_write_failed' });
    await expect(cache.set(k, 'new')).rejects.toMatchObject({ code: 'cache_write_failed' });
  });
});
