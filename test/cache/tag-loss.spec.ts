import KeyvRedis from '@keyv/redis';
import type { Redis } from 'ioredis';
import Keyv from 'keyv';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BufferCache, RedisLockService } from '../../lib/index.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedisCluster } from '../support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Tag versions live in the lock's Redis. When that state is lost (a tag key evicted under
 * `maxmemory`, a FLUSHALL, a restart without persistence), the entries that depend on it are built
 * again: a loss costs a rebuild, never an answer deleteByTag had deleted.
 */

// The lock's Redis, and a second one that holds the entries (Keyv on @keyv/redis).
let lockServer: RedisServer;
let storeServer: RedisServer;
let lockAdmin: Redis;
beforeAll(async () => {
  [lockServer, storeServer] = await Promise.all([startRedis(), startRedis()]);
  lockAdmin = lockServer.client();
});
afterAll(async () => {
  await Promise.all([lockServer?.stop(), storeServer?.stop()]);
});

/** What a test opened (Keyv connections), closed after it. */
const opened: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of opened.splice(0).toReversed()) await close().catch(() => undefined);
});

let n = 0;
const tag = (): string => `loss-tag-${++n}`;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A cache as one worker process has it, on `lock`'s Redis, its entries in `store` if given. */
function worker(lock: RedisServer, store?: object): BufferCache {
  const locks = new RedisLockService({ redis: () => lock.client(), namespace: 'test:loss:' });
  return new BufferCache({ lock: locks, store, options: { logger: new MemoryLogger() } });
}

/** A Keyv store on the second Redis: entries that outlive whatever happens to the lock's. */
function keyvStore(): Keyv {
  const keyv = new Keyv({ store: new KeyvRedis(storeServer.url) });
  opened.push(() => keyv.disconnect());
  return keyv;
}

/** The names of the tag keys in the lock's Redis. */
const tagKeys = (admin: Redis): Promise<string[]> => admin.keys('*{nestjs-buffer-lock}:tag:*');

/** The key of tag `t` in the lock's Redis (tags here have no glob characters). */
async function tagKeyOf(admin: Redis, t: string): Promise<string> {
  const [found, ...more] = await admin.keys(`*{nestjs-buffer-lock}:tag:${t}`);
  expect(found).toBeDefined();
  expect(more).toEqual([]);
  return found!;
}

/**
 * Builds `count` entries tagged `t` (value `old`), deletes by `t`, and returns the keys: each one
 * must never again answer `old`.
 */
async function deletedEntries(cache: BufferCache, t: string, count: number): Promise<string[]> {
  const keys = Array.from({ length: count }, (_, i) => `loss:${t}:${i}`);
  for (const k of keys) await cache.getOrSet(k, () => 'old', { ttl: 600, tags: [t] });
  await cache.deleteByTag(t);
  return keys;
}

/** How many of `keys` a fresh worker still answers with the value deleteByTag deleted. */
async function staleOf(cache: BufferCache, keys: readonly string[], t: string): Promise<number> {
  let stale = 0;
  for (const k of keys) {
    const value = await cache.getOrSet(k, () => 'new', { ttl: 600, tags: [t] });
    if (value === 'old') stale++;
  }
  return stale;
}

describe('tags: a lost tag version costs a rebuild, never a stale answer', () => {
  it('a tag key evicted under maxmemory (allkeys-lru) after deleteByTag: none of 60 entries is served old', async () => {
    // Ten samples per eviction (five by default) make Redis's approximate LRU evict the tag key first.
    const tight = await startRedis([
      '--maxmemory',
      '2mb',
      '--maxmemory-policy',
      'allkeys-lru',
      '--maxmemory-samples',
      '10',
    ]);
    const admin = tight.client();
    try {
      const t = tag();
      const keys = await deletedEntries(worker(tight), t, 60);
      const tagKey = await tagKeyOf(admin, t);
      // Idle for two ticks of Redis's LRU clock, while the entries are read again: the tag key is
      // the least recently used, and goes first when memory runs out.
      await sleep(2100);
      for (const k of await admin.keys('*')) if (k !== tagKey) await admin.get(k);
      const filler = 'x'.repeat(16 * 1024);
      for (let i = 0; (await admin.exists(tagKey)) === 1; i++) {
        expect(i).toBeLessThan(2000);
        await admin.set(`filler:${i}`, filler);
      }
      const survivors = (await admin.keys('*')).filter((k) => !k.startsWith('filler:'));
      // Not vacuous: entries outlived their tag's key.
      expect(survivors.length).toBeGreaterThan(20);
      expect(await staleOf(worker(tight), keys, t)).toBe(0);
    } finally {
      await tight.stop();
    }
  });

  it('FLUSHALL of the lock’s Redis, the entries in a Keyv store on another Redis: a miss, not the old value', async () => {
    const store = keyvStore();
    const t = tag();
    const keys = await deletedEntries(worker(lockServer, store), t, 20);
    await lockAdmin.flushall();
    expect(await staleOf(worker(lockServer, store), keys, t)).toBe(0);
  });

  it('a restart of the lock’s Redis without persistence, the entries in a Keyv store: a miss, not the old value', async () => {
    const store = keyvStore();
    const t = tag();
    const keys = await deletedEntries(worker(lockServer, store), t, 20);
    await lockServer.restart();
    expect(await staleOf(worker(lockServer, store), keys, t)).toBe(0);
  });

  it('an entry stamped after one deleteByTag stays a miss after another, whatever else the lock’s Redis lost between them', async () => {
    const store = keyvStore();
    const cache = worker(lockServer, store);
    const [k, t] = [`loss:between:${++n}`, tag()];
    await cache.deleteByTag(t);
    expect(await cache.getOrSet(k, () => 'old', { tags: [t] })).toBe('old');
    await cache.deleteByTag(t);
    // Every key but the tag's own is lost, as eviction may choose.
    const kept = new Set(await tagKeys(lockAdmin));
    for (const other of await lockAdmin.keys('*')) if (!kept.has(other)) await lockAdmin.del(other);
    await cache.deleteByTag(t);
    expect(await worker(lockServer, store).getOrSet(k, () => 'new', { tags: [t] })).toBe('new');
  });

  it('stamping an entry renews its tags’ keys: they outlive the entry (7 days, as its TTL at most)', async () => {
    const cache = worker(lockServer, new Map());
    const t = tag();
    await cache.deleteByTag(t);
    const tagKey = await tagKeyOf(lockAdmin, t);
    await lockAdmin.pexpire(tagKey, 5000);
    // A fresh worker reads the version to stamp its build with.
    await worker(lockServer, new Map()).getOrSet(`loss:renew:${++n}`, () => 1, { tags: [t] });
    expect(await lockAdmin.pttl(tagKey)).toBeGreaterThan(7 * 24 * 3600 * 1000 - 60_000);
  });

  it('versions never repeat: each deleteByTag gives the tag a version it never had, across FLUSHALLs', async () => {
    const cache = worker(lockServer, new Map());
    const t = tag();
    const seen = new Set<string>();
    for (let round = 0; round < 5; round++) {
      await lockAdmin.flushall();
      for (let bump = 0; bump < 3; bump++) {
        await cache.deleteByTag(t);
        const version = await lockAdmin.get(await tagKeyOf(lockAdmin, t));
        expect(version).not.toBeNull();
        expect(seen.has(version!)).toBe(false);
        seen.add(version!);
      }
    }
    expect(seen.size).toBe(15);
  });

  it('after a FLUSHALL, the fleet builds a tagged entry once: workers that knew the old version take the new one', async () => {
    const store = keyvStore();
    const [a, b] = [worker(lockServer, store), worker(lockServer, store)];
    const [k, t] = [`loss:fleet:${++n}`, tag()];
    let builds = 0;
    const build = (): number => ++builds;
    await a.deleteByTag(t);
    expect(await a.getOrSet(k, build, { tags: [t] })).toBe(1);
    expect(await b.getOrSet(k, build, { tags: [t] })).toBe(1);
    await lockAdmin.flushall();
    // The store lost nothing, but the entry's version is gone: one worker builds it again.
    const fresh = worker(lockServer, store);
    expect(await fresh.getOrSet(k, build, { tags: [t] })).toBe(2);
    for (const cache of [a, b, fresh, a, b]) {
      expect(await cache.getOrSet(k, build, { tags: [t] })).toBe(2);
    }
    expect(builds).toBe(2);
  });
});

describe('tags on a Redis Cluster', () => {
  it('a FLUSHALL of every shard, the entries in another store: a miss, not the old value, then one build for the fleet', async () => {
    const cluster = await startRedisCluster();
    try {
      const store = new Map<string, unknown>();
      const clusterWorker = (): BufferCache => {
        const lock = new RedisLockService({
          redis: () => cluster.client(),
          namespace: 'test:loss:',
        });
        return new BufferCache({ lock, store, options: { logger: new MemoryLogger() } });
      };
      const [a, b] = [clusterWorker(), clusterWorker()];
      const t = tag();
      const keys = await deletedEntries(a, t, 10);
      expect(await a.getOrSet(keys[0]!, () => 'b', { tags: [t] })).toBe('b');
      expect(await b.getOrSet(keys[0]!, () => 'c', { tags: [t] })).toBe('b');
      await Promise.all([0, 1, 2].map((i) => cluster.node(i).flushall()));
      expect(await staleOf(clusterWorker(), keys, t)).toBe(0);
      // Both workers knew the version lost: they take the one the rebuild announced.
      for (const cache of [a, b])
        expect(await cache.getOrSet(keys[0]!, () => 'd', { tags: [t] })).toBe('new');
    } finally {
      await cluster.stop();
    }
  });
});
