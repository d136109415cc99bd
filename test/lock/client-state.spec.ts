import type { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { LockError, RedisLockService, type RedisScriptClient } from '../../lib/index.js';
import { type RedisServer } from '../support/redis-server.js';
import { recordingClient, rkey, sleep, withRedisServer } from './lock-helpers.js';

const NS = 'client-state-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

const makeClient = (): Redis => server.client();
const connections = async (): Promise<number> =>
  String(await admin.client('LIST'))
    .trim()
    .split('\n').length;

const NO_CLIENT = 'Redis client factory returned no client';

describe('the Redis client: made by the factory on first use, or given as an object', () => {
  describe('a factory: called once, by the first acquire() or release(), and its client kept', () => {
    it('the first acquire calls the factory; later calls of every kind reuse its client', async () => {
      const factory = vi.fn(makeClient);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      const before = await connections();
      const [guard] = await lock.acquire('first-acquire');
      expect(factory).toHaveBeenCalledTimes(1);
      expect(await lock.acquire('first-acquire')).toEqual([undefined, undefined]);
      expect(await lock.extend(guard!)).toEqual([true, undefined]);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect((await lock.acquire('another'))[0]).toBeDefined();
      expect(factory).toHaveBeenCalledTimes(1);
      expect(await connections()).toBe(before + 1);
    });

    it('the first release calls the factory too', async () => {
      const [guard] = await new RedisLockService({ redis: makeClient, namespace: NS }).acquire(
        'first-release',
      );
      const factory = vi.fn(makeClient);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect(factory).toHaveBeenCalledTimes(1);
      expect(await admin.exists(guard!.key)).toBe(0);
      await lock.acquire('after-release');
      expect(factory).toHaveBeenCalledTimes(1);
    });

    it('the factory may return a promise; it is awaited and kept', async () => {
      const factory = vi.fn(async () => {
        await sleep(20);
        return server.client();
      });
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      const [guard, error] = await lock.acquire('async-factory');
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      await lock.release(guard!);
      expect(factory).toHaveBeenCalledTimes(1);
    });

    it.each([
      ['a synchronous factory', makeClient],
      [
        'a slow asynchronous factory',
        async (): Promise<Redis> => {
          await sleep(50);
          return server.client();
        },
      ],
    ])('50 concurrent first calls call %s exactly once', async (_, make) => {
      const factory = vi.fn(make);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      const keys = Array.from({ length: 50 }, (__, i) => `concurrent-${i}`);
      const results = await Promise.all([
        ...keys.map((key) => lock.acquire(key)),
        ...keys.map((key) => lock.acquire(key)),
      ]);
      expect(factory).toHaveBeenCalledTimes(1);
      // Every key was taken exactly once, through the one client.
      expect(results.filter(([guard]) => guard !== undefined)).toHaveLength(50);
      expect(results.filter(([, error]) => error !== undefined)).toHaveLength(0);
      await Promise.all(results.map(([guard]) => guard && lock.release(guard)));
    });
  });

  describe('a factory that gives no client or throws: (undefined, error), and it is asked again next time', () => {
    it.each([
      ['undefined', undefined],
      ['null', null],
      ['an object without eval()', {}],
    ])('a factory returning %s gives redis_no_client with the exact text', async (_, value) => {
      const lock = new RedisLockService({
        redis: () => value as unknown as RedisScriptClient,
        namespace: NS,
      });
      const [guard, error] = await lock.acquire('no-client');
      expect(guard).toBeUndefined();
      expect(error).toBeInstanceOf(LockError);
      expect(error!.code).toBe('redis_no_client');
      expect(error!.message).toBe('Redis lock failed: Redis client factory returned no client');
    });

    it('is asked again on the next call, and kept once it gives a client', async () => {
      const factory = vi
        .fn<() => Redis | undefined>()
        .mockReturnValueOnce(undefined)
        .mockReturnValueOnce(undefined)
        .mockImplementation(makeClient);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      expect((await lock.acquire('retry'))[1]?.code).toBe('redis_no_client');
      expect(factory).toHaveBeenCalledTimes(1);
      expect((await lock.acquire('retry'))[1]?.code).toBe('redis_no_client');
      expect(factory).toHaveBeenCalledTimes(2);
      const [guard, error] = await lock.acquire('retry');
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(factory).toHaveBeenCalledTimes(3);
      await lock.release(guard!);
      await lock.acquire('retry-more');
      expect(factory).toHaveBeenCalledTimes(3);
    });

    it('a factory that throws gives "Redis lock failed: <its message>" with the error as cause, then is asked again', async () => {
      const boom = new Error('getaddrinfo ENOTFOUND redis.internal');
      const factory = vi
        .fn<() => Redis>()
        .mockImplementationOnce(() => {
          throw boom;
        })
        .mockImplementation(makeClient);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      const [guard, error] = await lock.acquire('throws');
      expect(guard).toBeUndefined();
      expect(error!.code).toBe('redis_lock_failed');
      expect(error!.message).toBe('Redis lock failed: getaddrinfo ENOTFOUND redis.internal');
      expect(error!.cause).toBe(boom);
      expect((await lock.acquire('throws'))[0]).toBeDefined();
      expect(factory).toHaveBeenCalledTimes(2);
    });

    it('a rejected promise is the same as a throw', async () => {
      const lock = new RedisLockService({
        redis: () => Promise.reject(new Error('auth failed')),
        namespace: NS,
      });
      const [, error] = await lock.acquire('rejects');
      expect(error!.message).toBe('Redis lock failed: auth failed');
      expect((error!.cause as Error).message).toBe('auth failed');
    });

    it('50 concurrent first calls through a failing factory all fail, after one factory call', async () => {
      const factory = vi.fn<() => Redis | undefined>().mockReturnValueOnce(undefined);
      factory.mockImplementation(makeClient);
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) => lock.acquire(`fail-together-${i}`)),
      );
      expect(factory).toHaveBeenCalledTimes(1);
      expect(results.map(([guard, error]) => [guard, error?.code])).toEqual(
        Array.from({ length: 50 }, () => [undefined, 'redis_no_client']),
      );
      expect((await lock.acquire('fail-together-0'))[0]).toBeDefined();
      expect(factory).toHaveBeenCalledTimes(2);
    });

    it('release through a failing factory gives "Redis unlock failed: ..."', async () => {
      const [guard] = await new RedisLockService({ redis: makeClient, namespace: NS }).acquire(
        'release-no-client',
      );
      const none = new RedisLockService({ redis: () => undefined, namespace: NS });
      const [ok, error] = await none.release(guard!);
      expect(ok).toBe(false);
      expect(error!.code).toBe('redis_no_client');
      expect(error!.message).toBe(`Redis unlock failed: ${NO_CLIENT}`);
      const dies = new RedisLockService({
        redis: () => {
          throw new Error('ECONNREFUSED');
        },
        namespace: NS,
      });
      const [ok2, error2] = await dies.release(guard!);
      expect(ok2).toBe(false);
      expect(error2!.code).toBe('redis_unlock_failed');
      expect(error2!.message).toBe('Redis unlock failed: ECONNREFUSED');
      expect(await admin.get(guard!.key)).toBe(guard!.token);
    });
  });

  describe('a factory that never settles: the call fails after connectTimeout', () => {
    it('acquire, release and extend get redis_connect_timeout, and the next call asks again', async () => {
      const factory = vi
        .fn<() => Promise<Redis>>()
        .mockImplementationOnce(() => new Promise<Redis>(() => {}))
        .mockImplementationOnce(() => new Promise<Redis>(() => {}))
        .mockImplementation(() => Promise.resolve(makeClient()));
      const lock = new RedisLockService({ redis: factory, namespace: NS, connectTimeout: 0.2 });
      const start = Date.now();
      const [[guard, error], [ok, releaseError]] = await Promise.all([
        lock.acquire('hung-factory'),
        lock.release({ key: rkey(NS, 'x'), token: 't' }),
      ]);
      expect(Date.now() - start).toBeLessThan(2000);
      expect(guard).toBeUndefined();
      expect(error).toMatchObject({
        code: 'redis_connect_timeout',
        message: 'Redis lock failed: Redis client factory gave no client within 0.2 s',
      });
      expect(ok).toBe(false);
      expect(releaseError?.code).toBe('redis_connect_timeout');
      expect(factory).toHaveBeenCalledTimes(1);
      const [extended, extendError] = await lock.extend({ key: rkey(NS, 'x'), token: 't' });
      expect(extended).toBe(false);
      expect(extendError).toMatchObject({
        code: 'redis_connect_timeout',
        message: 'Redis lock extend failed: Redis client factory gave no client within 0.2 s',
      });
      expect(factory).toHaveBeenCalledTimes(2);
      const [taken, none] = await lock.acquire('hung-factory');
      expect(none).toBeUndefined();
      expect(await admin.get(taken!.key)).toBe(taken!.token);
      expect(factory).toHaveBeenCalledTimes(3);
      await lock.release(taken!);
    });

    it('the deadline is 10 s by default', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      try {
        const lock = new RedisLockService({ redis: () => new Promise<Redis>(() => {}) });
        let settled: unknown;
        void lock.acquire('hung-default').then((result) => (settled = result));
        await vi.advanceTimersByTimeAsync(9_900);
        expect(settled).toBeUndefined();
        await vi.advanceTimersByTimeAsync(200);
        expect(settled).toEqual([
          undefined,
          expect.objectContaining({ code: 'redis_connect_timeout' }),
        ]);
      } finally {
        vi.useRealTimers();
      }
    });

    it.each([0, -1, 'soon', Number.NaN])(
      'connectTimeout %j is refused by new',
      (connectTimeout) => {
        expect(
          () =>
            new RedisLockService({ redis: makeClient, connectTimeout: connectTimeout as number }),
        ).toThrow(expect.objectContaining({ code: 'redis_connect_timeout_invalid' }));
      },
    );
  });

  describe('an object as "redis": used as the client from the start', () => {
    it('the object itself is used from the first call, with no factory step', async () => {
      const real = server.client({ lazyConnect: true });
      const client = recordingClient(real);
      const lock = new RedisLockService({ redis: client, namespace: NS });
      expect(real.status).toBe('wait');
      const [guard] = await lock.acquire('object');
      expect(client.calls.length).toBeGreaterThan(0);
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(lock.redis).toBe(client);
      await lock.release(guard!);
    });

    it('two services given one object share its single connection', async () => {
      const shared = server.client();
      await shared.ping();
      const before = await connections();
      const [a, b] = [
        new RedisLockService({ redis: shared, namespace: NS }),
        new RedisLockService({ redis: shared, namespace: NS }),
      ];
      const [guard] = await a.acquire('shared');
      expect(await b.acquire('shared')).toEqual([undefined, undefined]);
      expect(await b.release(guard!)).toEqual([true, undefined]);
      expect(await connections()).toBe(before);
    });
  });
});
