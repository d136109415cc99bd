import type { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { RedisLockService, type LockGuard } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { rkey, untilExpired, withRedisServer, lockWorkers } from './lock-helpers.js';

const NS = 'pitfalls-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

/** One worker: its own service and its own connection, as after a fork. */
const worker = lockWorkers(() => server, NS);

describe('mistakes the API guards against', () => {
  describe('keeping only one value of the [guard, error] tuple', () => {
    it('a lost guard cannot be released: every worker sees busy until the ttl runs out', async () => {
      const [careless, other] = [worker({ ttl: 0.3 }), worker()];
      const lastSlot = (await careless.acquire('lost'))[1] as unknown as LockGuard;
      const key = rkey(NS, 'lost');
      expect(await admin.exists(key)).toBe(1); // taken in Redis ...
      const [ok, error] = await careless.release(lastSlot); // ... but the token is gone
      expect(ok).toBe(false);
      expect(error?.code).toBe('redis_invalid_guard');
      expect(await other.acquire('lost')).toEqual([undefined, undefined]);
      expect(await careless.acquire('lost')).toEqual([undefined, undefined]);
      await untilExpired(admin, key, 5000);
      expect((await other.acquire('lost'))[0]).toBeDefined();
    });
  });

  describe('a ttl shorter than the build', () => {
    it('a builder still working when the lock expires: a second worker takes it and builds too', async () => {
      const [slow, second] = [worker({ ttl: 0.2 }), worker()];
      const [first] = await slow.acquire('slow-build');
      // The slow builder is still "building" while Redis expires its lock.
      await untilExpired(admin, first!.key, 5000);
      const [another] = await second.acquire('slow-build');
      expect(another).toBeDefined(); // two builders at once
      // When the slow builder finishes, its release leaves the second builder's lock alone.
      expect(await slow.release(first!)).toEqual([true, undefined]);
      expect(await admin.get(first!.key)).toBe(another!.token);
    });
  });

  describe('a client object made before the fork', () => {
    it('a factory gives every worker its own connection, made on first use', async () => {
      const made: Redis[] = [];
      const factory = vi.fn(() => {
        const client = server.client();
        made.push(client);
        return client;
      });
      const workers = [1, 2, 3].map(() => new RedisLockService({ redis: factory, namespace: NS }));
      expect(factory).not.toHaveBeenCalled(); // nothing made in "startup"
      for (const [i, w] of workers.entries()) await w.acquire(`factory-${i}`);
      expect(factory).toHaveBeenCalledTimes(3);
      const ids = await Promise.all(made.map((c) => c.client('ID')));
      expect(new Set(ids).size).toBe(3);
    });

    it('an object is shared as it is: every worker given it uses the one connection', async () => {
      const shared = server.client();
      const workers = [1, 2].map(() => new RedisLockService({ redis: shared, namespace: NS }));
      expect(workers.map((w) => w.redis)).toEqual([shared, shared]);
      const [guard] = await workers[0]!.acquire('shared-object');
      expect(await workers[1]!.release(guard!)).toEqual([true, undefined]);
    });
  });

  describe('a slow Redis server slows every cached request', () => {
    it('with a command timeout on the client, a stalled server gives an error instead of a hang', async () => {
      const stalled = await startRedis();
      try {
        const client = stalled.client({ commandTimeout: 300, maxRetriesPerRequest: 0 });
        await client.ping();
        const lock = new RedisLockService({ redis: client, namespace: NS });
        stalled.pause();
        const [guard, error] = await lock.acquire('stalled');
        expect(guard).toBeUndefined();
        expect(error?.code).toBe('redis_lock_failed');
        expect(error?.message).toBe('Redis lock failed: Command timed out');
      } finally {
        stalled.resume();
        await stalled.stop();
      }
    });
  });

  describe('changing options after construction', () => {
    it('is impossible: the accessors are read-only, so the ttl cannot become 0', async () => {
      const lock = worker({ ttl: 30 });
      expect(() => {
        (lock as unknown as { ttl: number }).ttl = 0;
      }).toThrow(TypeError);
      const [guard] = await lock.acquire('ttl-kept');
      expect(await admin.pttl(guard!.key)).toBeGreaterThan(25_000);
    });

    it('even a property forced over the accessor does not change what is sent to Redis', async () => {
      const lock = worker({ ttl: 30, namespace: NS });
      Object.defineProperty(lock, 'ttl', { value: 0 });
      Object.defineProperty(lock, 'namespace', { value: 'elsewhere:' });
      const [guard] = await lock.acquire('forced');
      expect(guard!.key).toBe(rkey(NS, 'forced'));
      expect(await admin.pttl(guard!.key)).toBeGreaterThan(25_000);
    });
  });

  describe('The lock is not re-entrant', () => {
    it('a second acquire by the holder returns busy (undefined, undefined)', async () => {
      const lock = worker();
      const [guard] = await lock.acquire('reentrant');
      expect(await lock.acquire('reentrant')).toEqual([undefined, undefined]);
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      await lock.release(guard!);
      expect((await lock.acquire('reentrant'))[0]).toBeDefined();
    });
  });

  describe('undefined values', () => {
    it("acquire(undefined) returns (undefined, 'cache key is not defined')", async () => {
      const [guard, error] = await worker().acquire(undefined as unknown as string);
      expect([guard, error?.message]).toEqual([undefined, 'cache key is not defined']);
    });

    it("release(undefined) returns (false, 'invalid lock guard')", async () => {
      const [ok, error] = await worker().release(undefined as unknown as LockGuard);
      expect([ok, error?.message]).toEqual([false, 'invalid lock guard']);
    });

    it('a factory returning undefined gives the no-client error and is asked again', async () => {
      const factory = vi.fn(() => undefined);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      const [guard, error] = await lock.acquire('k');
      expect([guard, error?.message]).toEqual([
        undefined,
        'Redis lock failed: Redis client factory returned no client',
      ]);
      await lock.acquire('k');
      expect(factory).toHaveBeenCalledTimes(2);
    });

    it.each([
      ['ttl', 60],
      ['namespace', 'buffer:lock:'],
    ])('new({ %s: undefined }) takes the default, as if not given', (option, fallback) => {
      const lock = new RedisLockService({ redis: () => undefined, [option]: undefined });
      expect(lock[option as 'ttl' | 'namespace']).toBe(fallback);
    });
  });
});
