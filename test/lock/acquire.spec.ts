import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  LockError,
  RedisLockService,
  type MessageId,
  type RedisClientFactory,
} from '../../lib/index.js';
import {
  BACKENDS,
  inspectorFor,
  lockCommandsFrom,
  type KeyInspector,
} from '../support/client-families.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  failFastClient,
  rkey,
  untilExpired,
  withRedisServer,
  lockWorkers,
} from './lock-helpers.js';

const NS = 'acquire-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

/** One ioredis worker: its own service and its own connection, as after a fork. */
const ioredisWorker = lockWorkers(() => server, NS);

describe.each(BACKENDS)('acquire through $name', (family) => {
  // Each family its own keys: what one family's test holds is not another's.
  const ns = `${NS}${family.name}:`;
  /** One worker: its own service and its own client of the family, as after a fork. */
  const worker = lockWorkers(() => server, ns, family);
  afterAll(() => family.closeAll());
  /** The keys the family's clients see: through an admin connection, or in the in-memory keyspace. */
  let keys: KeyInspector;
  beforeAll(() => void (keys = inspectorFor(family, server)));

  describe('a free key: acquire takes the lock with SET NX PX and the ttl', () => {
    it('returns ({key, token}, undefined); Redis holds the token under namespace + MD5 of the key, with the TTL', async () => {
      const lock = worker({ ttl: 30 });
      expect(await keys.exists(rkey(ns, 'one'))).toBe(0);
      const [guard, error] = await lock.acquire('one');
      expect(error).toBeUndefined();
      expect(guard).toEqual({ key: rkey(ns, 'one'), token: expect.any(String) });
      expect(Object.keys(guard!).toSorted()).toEqual(['key', 'token']);
      expect(await keys.get(guard!.key)).toBe(guard!.token);
      const pttl = await keys.pttl(guard!.key);
      expect(pttl).toBeGreaterThan(25_000);
      expect(pttl).toBeLessThanOrEqual(30_000);
    });

    it('touches only its own key', async () => {
      await keys.set('someone-else', 'v');
      const before = await keys.dbsize();
      const [guard] = await worker().acquire('only-this');
      expect(await keys.dbsize()).toBe(before + 1);
      expect(await keys.get('someone-else')).toBe('v');
      expect(await keys.get(guard!.key)).toBe(guard!.token);
    });

    it('of many workers racing for one free key, exactly one gets it', async () => {
      const workers = Array.from({ length: 20 }, () => worker());
      const results = await Promise.all(workers.map((w) => w.acquire('race')));
      const winners = results.filter(([guard]) => guard !== undefined);
      expect(winners).toHaveLength(1);
      expect(results.filter(([g, e]) => g === undefined && e === undefined)).toHaveLength(19);
      expect(await keys.get(rkey(ns, 'race'))).toBe(winners[0]![0]!.token);
    });
  });

  describe('a held key whose ttl runs out: Redis deletes it by itself, and the key is free again', () => {
    it('the key disappears after ttl, and another worker can then take it', async () => {
      const [a, b] = [worker({ ttl: 0.2 }), worker({ ttl: 5 })];
      const [first] = await a.acquire('expires');
      expect(first).toBeDefined();
      expect(await b.acquire('expires')).toEqual([undefined, undefined]);
      await untilExpired(keys, first!.key, 5000);
      const [second, error] = await b.acquire('expires');
      expect(error).toBeUndefined();
      expect(second!.token).not.toBe(first!.token);
      expect(await keys.get(first!.key)).toBe(second!.token);
    });
  });

  describe('a held key: acquire is busy for every worker, the holder too', () => {
    it('returns (undefined, undefined) for another worker and for the holder; nothing changes', async () => {
      const [holder, other] = [worker({ ttl: 30 }), worker({ ttl: 30 })];
      const [guard] = await holder.acquire('busy');
      const pttlBefore = await keys.pttl(guard!.key);
      expect(await other.acquire('busy')).toEqual([undefined, undefined]);
      expect(await holder.acquire('busy')).toEqual([undefined, undefined]);
      expect(await keys.get(guard!.key)).toBe(guard!.token);
      // Not refreshed: a busy acquire does not move the expiry.
      expect(await keys.pttl(guard!.key)).toBeLessThanOrEqual(pttlBefore);
    });

    it('a key held by anything else in Redis is busy too', async () => {
      await keys.set(rkey(ns, 'foreign'), 'not-a-token', 'PX', 30_000);
      expect(await worker().acquire('foreign')).toEqual([undefined, undefined]);
      expect(await keys.get(rkey(ns, 'foreign'))).toBe('not-a-token');
    });
  });

  describe('the key: must be given, and must be a string', () => {
    it.each([
      ['undefined', undefined],
      ['null', null],
    ])(
      'acquire(%s) returns (undefined, lock_key_undefined) without asking Redis',
      async (_, key) => {
        const lock = worker();
        await lock.acquire('connect-first');
        const sentSince = await lockCommandsFrom(family, admin);
        const [guard, error] = await lock.acquire(key as unknown as string);
        expect(guard).toBeUndefined();
        expect(error).toBeInstanceOf(LockError);
        expect(error!.code).toBe('lock_key_undefined');
        expect(error!.message).toBe('cache key is not defined');
        expect(await sentSince()).toEqual([]);
      },
    );

    it.each([
      ['a number', 42],
      ['an object', { id: 1 }],
      ['an array', ['a']],
      ['a boolean', true],
    ])('acquire(%s) returns (undefined, lock_key_invalid)', async (_, key) => {
      const [guard, error] = await worker().acquire(key as unknown as string);
      expect(guard).toBeUndefined();
      expect(error?.code).toBe('lock_key_invalid');
      expect(error?.message).toBe('cache key must be a string');
    });
  });
});

describe('acquire when Redis is unreachable, or there is no client: (undefined, error), and nothing changes', () => {
  it('a stopped server gives (undefined, redis_lock_failed) with the client error in ERROR and cause', async () => {
    const down = await startRedis();
    const client = failFastClient(down);
    await client.ping();
    await down.stop();
    const lock = new RedisLockService({ redis: client, namespace: NS });
    const [guard, error] = await lock.acquire('unreachable');
    expect(guard).toBeUndefined();
    expect(error).toBeInstanceOf(LockError);
    expect(error!.code).toBe('redis_lock_failed');
    expect(error!.cause).toBeInstanceOf(Error);
    expect(error!.message).toBe(`Redis lock failed: ${(error!.cause as Error).message}`);
  });

  it('a server that never was there gives the same kind of error through a factory', async () => {
    const down = await startRedis();
    await down.stop();
    const lock = new RedisLockService({ redis: () => failFastClient(down), namespace: NS });
    const [guard, error] = await lock.acquire('never');
    expect(guard).toBeUndefined();
    expect(error?.code).toBe('redis_lock_failed');
    expect(error?.message).toMatch(/^Redis lock failed: .+/);
  });

  it.each<[string, RedisClientFactory, MessageId]>([
    [
      'a factory that throws',
      () => {
        throw new Error('no route to redis');
      },
      'redis_lock_failed',
    ],
    ['a factory that returns undefined', () => undefined, 'redis_no_client'],
    [
      'a factory whose promise rejects',
      () => Promise.reject(new Error('DNS')),
      'redis_lock_failed',
    ],
  ])('%s: (undefined, error) and Redis is unchanged', async (_, factory, code) => {
    const holder = ioredisWorker();
    const [held] = await holder.acquire('held-while-down');
    const before = { size: await admin.dbsize(), held: await admin.get(held!.key) };
    const lock = new RedisLockService({ redis: factory, namespace: NS });
    for (const key of ['free-while-down', 'held-while-down']) {
      const [guard, error] = await lock.acquire(key);
      expect(guard).toBeUndefined();
      expect(error?.code).toBe(code);
    }
    expect(await admin.exists(rkey(NS, 'free-while-down'))).toBe(0);
    expect({ size: await admin.dbsize(), held: await admin.get(held!.key) }).toEqual(before);
    await holder.release(held!);
  });
});
