import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCache, LockError, RedisLockService } from '../../lib/index.js';
import { sentDuring } from '../support/command-stats.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

let n = 0;
const key = (): string => `tags:${++n}`;
const tag = (): string => `tag-${++n}`;

type Options = NonNullable<ConstructorParameters<typeof BufferCache>[0]['options']>;

/** A cache as one worker process has it: its own client, lock and subscriber. */
function worker(options: Options = {}, store?: object): BufferCache {
  const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:tags:' });
  return new BufferCache({ lock, store, options: { logger: new MemoryLogger(), ...options } });
}

/** The factory of a key, counting its builds. */
function counted(): { factory: () => number; builds: () => number } {
  let builds = 0;
  return { factory: () => ++builds, builds: () => builds };
}

describe('tags: deleteByTag makes every entry that carries one of them a miss', () => {
  it('the next call of a tagged entry builds it again; entries without that tag stay', async () => {
    const cache = worker();
    const [a, b, c] = [key(), key(), key()];
    const [reports, prices] = [tag(), tag()];
    const builds = { a: counted(), b: counted(), c: counted() };
    await cache.getOrSet(a, builds.a.factory, { tags: [reports] });
    await cache.getOrSet(b, builds.b.factory, { tags: [reports, prices] });
    await cache.getOrSet(c, builds.c.factory, { tags: [prices] });
    await cache.deleteByTag(reports);
    expect(await cache.getOrSet(a, builds.a.factory, { tags: [reports] })).toBe(2);
    expect(await cache.getOrSet(b, builds.b.factory, { tags: [reports, prices] })).toBe(2);
    expect(await cache.getOrSet(c, builds.c.factory, { tags: [prices] })).toBe(1);
    // Built again after the bump, they are hits.
    expect(await cache.getOrSet(a, builds.a.factory, { tags: [reports] })).toBe(2);
  });

  it('a deleted tag’s entry is never served, not even within grace, and get() finds none', async () => {
    const cache = worker();
    const [k, t] = [key(), tag()];
    const options = { ttl: 0.2, grace: 600, tags: [t] };
    const { factory, builds } = counted();
    await cache.getOrSet(k, factory, options);
    await new Promise((resolve) => setTimeout(resolve, 250));
    // Stale and within grace: served at once while it refreshes.
    const stale: string[] = [];
    cache.on('stale', (at) => stale.push(at));
    await cache.getOrSet(k, factory, options);
    expect(stale).toEqual([k]);
    await until(() => builds() === 2);
    await new Promise((resolve) => setTimeout(resolve, 250));
    await cache.deleteByTag([t]);
    expect(await cache.get(k)).toBeUndefined();
    expect(await cache.getOrSet(k, factory, options)).toBe(3);
    expect(stale).toEqual([k]);
  });

  it('a tag deleted while its entry is built: the entry it writes is a miss', async () => {
    const cache = worker();
    const [k, t] = [key(), tag()];
    let builds = 0;
    const slow = async (): Promise<number> => {
      const build = ++builds;
      if (build === 1) await cache.deleteByTag(t);
      return build;
    };
    expect(await cache.getOrSet(k, slow, { tags: [t] })).toBe(1);
    expect(await cache.getOrSet(k, slow, { tags: [t] })).toBe(2);
    expect(await cache.getOrSet(k, slow, { tags: [t] })).toBe(2);
  });

  it('set() with tags, and @CachePut’s write, carry them too', async () => {
    const cache = worker();
    const [k, t] = [key(), tag()];
    await cache.set(k, 'v', { tags: [t] });
    expect(await cache.get(k)).toBe('v');
    await cache.deleteByTag(t);
    expect(await cache.get(k)).toBeUndefined();
  });

  it('costs one command whatever the number of entries that carry the tag', async () => {
    const cache = worker();
    const [one, many] = [tag(), tag()];
    await cache.set(key(), 1, { tags: [one] });
    for (let i = 0; i < 2000; i++) await cache.set(`many:${i}`, i, { tags: [many] });
    const forOne = await sentDuring(server, () => cache.deleteByTag(one));
    const forMany = await sentDuring(server, () => cache.deleteByTag(many));
    expect(forMany).toEqual(forOne);
    expect(forOne.filter((name) => name === 'evalsha' || name === 'eval')).toHaveLength(1);
    expect(await cache.get('many:1999')).toBeUndefined();
  });

  it('a hit of a tagged entry sends what a hit of an untagged one does', async () => {
    const cache = worker();
    const [tagged, plain, t] = [key(), key(), tag()];
    await cache.getOrSet(tagged, () => 1, { tags: [t] });
    await cache.getOrSet(plain, () => 1);
    // The first reads learn the tag's version and subscribe to the bus; then hits cost a read.
    await until(async () => {
      await cache.getOrSet(tagged, () => 2, { tags: [t] });
      const sent = await sentDuring(server, () => cache.getOrSet(tagged, () => 2, { tags: [t] }));
      return sent.length === 1;
    });
    const taggedHit = await sentDuring(server, () =>
      cache.getOrSet(tagged, () => 2, { tags: [t] }),
    );
    const plainHit = await sentDuring(server, () => cache.getOrSet(plain, () => 2));
    expect(taggedHit).toEqual(plainHit);
  });

  it('works in front of any store: the versions live in the lock’s Redis', async () => {
    const entries = new Map<string, string>();
    const store = {
      get: (k: string) => entries.get(k),
      set: (k: string, value: string) => void entries.set(k, value),
      delete: (k: string) => void entries.delete(k),
    };
    const cache = worker({}, store);
    const [k, t] = [key(), tag()];
    const { factory } = counted();
    await cache.getOrSet(k, factory, { tags: [t] });
    await cache.deleteByTag(t);
    expect(await cache.getOrSet(k, factory, { tags: [t] })).toBe(2);
  });

  it('refuses tags that are no array of non-empty strings, in the catalog’s words', async () => {
    const cache = worker();
    await expect(
      cache.getOrSet(key(), () => 1, { tags: 'reports' as never }),
    ).rejects.toMatchObject({ violations: [{ code: 'cache_tags_invalid' }] });
    await expect(cache.getOrSet(key(), () => 1, { tags: [''] })).rejects.toMatchObject({
      violations: [{ code: 'cache_tags_invalid' }],
    });
    for (const bad of ['', [], [''], [3], undefined]) {
      await expect(cache.deleteByTag(bad as never)).rejects.toBeInstanceOf(LockError);
      await expect(cache.deleteByTag(bad as never)).rejects.toMatchObject({
        code: 'cache_tags_invalid',
      });
    }
  });

  it('a deleteByTag Redis cannot take rejects in the catalog’s words, the cause kept', async () => {
    const down = await startRedis();
    const lock = new RedisLockService({
      redis: () => down.client({ maxRetriesPerRequest: 0, enableOfflineQueue: false }),
      namespace: 'test:tags:',
    });
    const cache = new BufferCache({ lock, options: { logger: new MemoryLogger() } });
    // Connected once a write goes through (without an offline queue, one may come too early).
    const k = key();
    await until(() =>
      cache.set(k, 1).then(
        () => true,
        () => false,
      ),
    );
    await down.kill();
    const error: unknown = await cache.deleteByTag(tag()).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(LockError);
    expect(error).toMatchObject({ code: 'cache_delete_by_tag_failed' });
    expect((error as Error).message).toMatch(/^Deleting cache entries by tag failed: /);
    expect((error as Error).cause).toBeInstanceOf(Error);
    await down.stop();
  });

  it('a client that answers the tag scripts with nonsense: deleteByTag rejects, a tagged read is a miss', async () => {
    for (const reply of [null, 'OK', { version: 3 }, [1, 2, 3], -1]) {
      const client = { eval: () => Promise.resolve(reply) };
      const lock = new RedisLockService({ redis: client, namespace: 'test:tags:' });
      const logger = new MemoryLogger();
      const cache = new BufferCache({ lock, options: { logger }, store: new Map() });
      await expect(cache.deleteByTag('t')).rejects.toMatchObject({
        code: 'cache_delete_by_tag_failed',
      });
      let builds = 0;
      // The versions cannot be read: the value is answered, and nothing is stored.
      expect(await cache.getOrSet('k', () => ++builds, { tags: ['t'] })).toBe(1);
      expect(await cache.getOrSet('k', () => ++builds, { tags: ['t'] })).toBe(2);
    }
  });

  it('on memory:// too', async () => {
    const lock = new RedisLockService({
      redis: 'memory://tags',
      messages: { memory_backend: '-' },
    });
    const cache = new BufferCache({ lock, options: { logger: new MemoryLogger() } });
    const [k, t] = [key(), tag()];
    const { factory } = counted();
    await cache.getOrSet(k, factory, { tags: [t] });
    expect(await cache.getOrSet(k, factory, { tags: [t] })).toBe(1);
    await cache.deleteByTag(t);
    expect(await cache.getOrSet(k, factory, { tags: [t] })).toBe(2);
  });
});

describe('tags across workers', () => {
  it.each([
    ['without l1', {}],
    ['with l1', { l1: { maxAge: 60 } }],
  ])('%s: a deleteByTag in one worker makes the other’s next read a miss', async (_, options) => {
    const [a, b] = [worker(options), worker(options)];
    const [k, t] = [key(), tag()];
    const { factory, builds } = counted();
    await a.getOrSet(k, factory, { tags: [t] });
    // b learns the tag's version (and, with l1, keeps a copy): its reads are hits.
    await until(async () => {
      await b.getOrSet(k, factory, { tags: [t] });
      return (await sentDuring(server, () => b.getOrSet(k, factory, { tags: [t] }))).length <= 1;
    });
    expect(builds()).toBe(1);
    await a.deleteByTag(t);
    await until(async () => (await b.getOrSet(k, factory, { tags: [t] })) === 2);
    expect(builds()).toBe(2);
  });

  it('a worker whose subscriber is killed reads the versions again: no entry of a deleted tag is served', async () => {
    const [a, b] = [worker(), worker()];
    const [k, t] = [key(), tag()];
    const { factory } = counted();
    await b.getOrSet(k, factory, { tags: [t] });
    await until(async () => {
      await b.getOrSet(k, factory, { tags: [t] });
      return (await sentDuring(server, () => b.getOrSet(k, factory, { tags: [t] }))).length === 1;
    });
    await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    // b hears nothing of this bump: what it knew was dropped with its subscription.
    await a.deleteByTag(t);
    expect(await b.getOrSet(k, factory, { tags: [t] })).toBe(2);
  });
});
