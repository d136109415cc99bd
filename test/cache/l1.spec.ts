import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCache, BufferLockConfigError, RedisLockService } from '../../lib/index.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { sentDuring } from '../support/command-stats.js';

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

let n = 0;
const key = (): string => `l1:${++n}`;

type Options = NonNullable<ConstructorParameters<typeof BufferCache>[0]['options']>;

/** A cache as one worker process has it: its own client, lock and subscriber. */
function worker(
  options: Options = {},
  given: { client?: () => Redis; now?: () => number; store?: object } = {},
): BufferCache {
  const redis = given.client ?? (() => server.client());
  const lock = new RedisLockService({ redis, namespace: 'test:l1:' });
  const logger = new MemoryLogger();
  const { now, store } = given;
  return new BufferCache({ lock, store, options: { logger, ...options }, now });
}

const withL1 = (l1: Options['l1'] = { maxAge: 60 }): BufferCache => worker({ l1 });

/**
 * Reads `key` until the cache's in-process tier holds it: a read that sends nothing to Redis.
 * The tier keeps copies only once it is subscribed to invalidations, which its first use starts.
 */
async function held(cache: BufferCache, k: string): Promise<void> {
  await until(async () => {
    await cache.get(k);
    return (await sentDuring(server, () => cache.get(k))).length === 0;
  });
}

describe('l1: an in-process tier in front of the store', () => {
  it('is off by default: every hit reads the store', async () => {
    const cache = worker();
    const k = key();
    await cache.getOrSet(k, () => 'v1');
    const sent = await sentDuring(server, () =>
      Promise.all([1, 2, 3].map(() => cache.getOrSet(k, () => 'x'))),
    );
    expect(sent.length).toBeGreaterThan(0);
  });

  it('a hit in l1 sends nothing to Redis, and answers the value a store hit would', async () => {
    const cache = withL1();
    const k = key();
    let builds = 0;
    const value = { items: [1, 2], at: '2026-01-01' };
    expect(await cache.getOrSet(k, () => (builds++, value))).toEqual(value);
    await held(cache, k);
    const answers: unknown[] = [];
    const sent = await sentDuring(server, async () => {
      for (let i = 0; i < 100; i++) answers.push(await cache.getOrSet(k, () => (builds++, 'x')));
    });
    expect(sent).toEqual([]);
    expect(builds).toBe(1);
    expect(answers).toHaveLength(100);
    for (const answer of answers) expect(answer).toEqual(value);
  });

  it('emits hit for an l1 hit, as for a store hit', async () => {
    const cache = withL1();
    const k = key();
    await cache.getOrSet(k, () => 1);
    await held(cache, k);
    const hits: string[] = [];
    cache.on('hit', (hit) => hits.push(hit));
    await cache.getOrSet(k, () => 2);
    expect(hits).toEqual([k]);
  });

  it('l1: false on a call reads the store every time, and keeps nothing', async () => {
    const cache = withL1();
    const k = key();
    await cache.getOrSet(k, () => 1, { l1: false });
    for (let i = 0; i < 3; i++) {
      const sent = await sentDuring(server, () => cache.getOrSet(k, () => 2, { l1: false }));
      expect(sent.length).toBeGreaterThan(0);
    }
  });

  it('a copy is served maxAge at most, even when no invalidation comes', async () => {
    let clock = Date.now();
    const now = (): number => clock;
    const reader = worker({ l1: { maxAge: 2 } }, { now });
    // A writer without l1 announces nothing: only maxAge ends the reader's copy.
    const writer = worker({}, { now });
    const k = key();
    await writer.set(k, 'v1', { ttl: 600 });
    await held(reader, k);
    await writer.set(k, 'v2', { ttl: 600 });
    expect(await reader.get(k)).toBe('v1');
    clock += 1999;
    expect(await reader.get(k)).toBe('v1');
    clock += 1;
    expect(await reader.get(k)).toBe('v2');
  });

  it('a write the store refused is not kept: no worker could read that value', async () => {
    const values = new Map<string, string>();
    let reads = 0;
    const store = {
      get: (k: string) => (reads++, values.get(k)),
      set: (k: string, value: string) => {
        if (k.includes('refused')) throw new Error('the store is down');
        values.set(k, value);
      },
      delete: (k: string) => void values.delete(k),
    };
    const cache = worker({ l1: { maxAge: 60 } }, { store });
    // Once subscribed, what it writes is kept: read back with no store read.
    await until(async () => {
      await cache.set('l1:taken', 1);
      const before = reads;
      return (await cache.get('l1:taken')) === 1 && reads === before;
    });
    const refused: unknown = await cache.set('l1:refused', 2).catch((error: unknown) => error);
    expect(refused).toMatchObject({ code: 'cache_write_failed' });
    expect((refused as Error).cause).toMatchObject({ message: 'the store is down' });
    const before = reads;
    expect(await cache.get('l1:refused')).toBeUndefined();
    expect(reads).toBe(before + 1);
  });

  it('keeps maxEntries copies at most, the least recently used going first', async () => {
    const cache = withL1({ maxEntries: 3, maxAge: 60 });
    const keys = [key(), key(), key(), key()];
    for (const k of keys) await cache.set(k, k);
    await held(cache, keys[0]!);
    for (const k of keys.slice(1)) await held(cache, k);
    // keys[0] was used least recently when keys[3] came in: it went; the others are held.
    expect(await sentDuring(server, () => cache.get(keys[0]!))).not.toEqual([]);
    expect(await sentDuring(server, () => cache.get(keys[3]!))).toEqual([]);
  });
});

describe('l1 across workers: every write or delete drops the other copies', () => {
  it('set() in one worker: the other serves the new value, with maxAge far off', async () => {
    const [a, b] = [withL1(), withL1()];
    const k = key();
    await a.set(k, 'v1');
    await held(b, k);
    await a.set(k, 'v2');
    await until(async () => (await b.get(k)) === 'v2');
    // And it holds the new one again.
    await held(b, k);
    expect(await b.get(k)).toBe('v2');
  });

  it('delete() in one worker: the other builds again', async () => {
    const [a, b] = [withL1(), withL1()];
    const k = key();
    let builds = 0;
    await b.getOrSet(k, () => ++builds);
    await held(b, k);
    await a.delete(k);
    await until(async () => (await b.getOrSet(k, () => ++builds)) === 2);
    expect(builds).toBe(2);
  });

  it('a build in one worker replaces the stale copies of the others', async () => {
    const [a, b] = [withL1(), withL1()];
    const k = key();
    const options = { ttl: 0.3, grace: 600 };
    await a.getOrSet(k, () => 'old', options);
    await held(a, k);
    await held(b, k);
    await new Promise((resolve) => setTimeout(resolve, 350));
    // Stale in both: a refreshes it, b's stale copy is dropped once that is written.
    expect(await a.getOrSet(k, () => 'new', options)).toBe('old');
    await until(async () => (await b.getOrSet(k, () => 'new', options)) === 'new');
  });

  it('a worker whose subscriber is killed flushes its copies and holds none until subscribed again', async () => {
    const reader = withL1();
    // Writes without l1 announce nothing: what the reader serves shows whether it kept a copy.
    const writer = worker();
    const k = key();
    await writer.set(k, 'v1');
    await held(reader, k);
    await writer.set(k, 'v2');
    expect(await reader.get(k)).toBe('v1');
    await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await until(async () => (await reader.get(k)) === 'v2');
    // Subscribed again, it keeps copies again.
    await held(reader, k);
    await writer.set(k, 'v3');
    expect(await reader.get(k)).toBe('v2');
  });

  it('a worker with no subscription yet keeps nothing: a Redis without SSUBSCRIBE leaves l1 unused', async () => {
    const refused = await startRedis(['--rename-command', 'SSUBSCRIBE', '""']);
    try {
      const cache = worker({ l1: { maxAge: 60 } }, { client: () => refused.client() });
      const k = key();
      await cache.set(k, 1);
      for (let i = 0; i < 5; i++) {
        expect(await sentDuring(refused, () => cache.get(k))).toContain('evalsha');
      }
    } finally {
      await refused.stop();
    }
  });
});

describe('l1 options', () => {
  it.each([
    [{ maxEntries: 0 }, 'l1_max_entries_invalid'],
    [{ maxEntries: 1.5 }, 'l1_max_entries_invalid'],
    [{ maxAge: 0 }, 'l1_max_age_invalid'],
    [{ maxAge: 'soon' }, 'l1_max_age_invalid'],
    [{ size: 10 }, 'option_unknown'],
    [true, 'l1_invalid'],
    ['on', 'l1_invalid'],
  ])('l1: %j is refused with %s', (l1, code) => {
    let error: unknown;
    try {
      worker({ l1: l1 as Options['l1'] });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).violations.map((v) => v.code)).toContain(code);
  });

  it("a call's l1 must be true or false", async () => {
    const cache = withL1();
    await expect(cache.getOrSet(key(), () => 1, { l1: 'no' as never })).rejects.toMatchObject({
      violations: [{ code: 'cache_l1_invalid' }],
    });
  });
});

describe('l1 on a Redis Cluster', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster();
  }, 60_000);
  afterAll(() => cluster?.stop());
  const clusterClient = (): Redis => cluster.client() as unknown as Redis;

  it('a set() in one worker drops the copy of a worker on its own Cluster client', async () => {
    const a = worker({ l1: { maxAge: 60 } }, { client: clusterClient });
    const b = worker({ l1: { maxAge: 60 } }, { client: clusterClient });
    // Without l1 it announces nothing: b still serving v1 after its write shows b holds a copy.
    const silent = worker({}, { client: clusterClient });
    let k = key();
    // A new key each try: a try before b was subscribed leaves it nothing to go by.
    await until(async () => {
      k = key();
      await silent.set(k, 'v1');
      await b.get(k);
      await silent.set(k, 'unannounced');
      return (await b.get(k)) === 'v1';
    });
    await a.set(k, 'v2');
    await until(async () => (await b.get(k)) === 'v2');
  });
});
