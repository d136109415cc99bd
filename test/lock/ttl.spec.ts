import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockError, RedisLockService, type LockGuard } from '../../lib/index.js';
import { BACKENDS, inspectorFor, type KeyInspector } from '../support/client-families.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  failFastClient,
  recordingClient,
  rkey,
  untilExpired,
  withRedisServer,
  lockWorkers,
} from './lock-helpers.js';

const NS = 'ttl-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

/** The PX milliseconds the service sent with its last script call (the last ARGV). */
/** The last call's last argument: an acquire's is its ttl in ms and its token (`<ms> <token>`). */
const lastArgv = (client: ReturnType<typeof recordingClient>): unknown =>
  client.calls.at(-1)!.args.at(-1);

describe.each(BACKENDS)('through $name', (family) => {
  // Each family its own keys: what one family's test holds is not another's.
  const ns = `${NS}${family.name}:`;
  /** One worker: its own service and its own client of the family, as after a fork. */
  const worker = lockWorkers(() => server, ns, family);
  afterAll(() => family.closeAll());
  /** The keys the family's clients see: through an admin connection, or in the in-memory keyspace. */
  let keys: KeyInspector;
  beforeAll(() => void (keys = inspectorFor(family, server)));

  describe('ttl: sent to Redis in whole milliseconds, never less than 1', () => {
    it('ttl 0.5 gives a PTTL of about 500 ms', async () => {
      const lock = worker({ ttl: 0.5 });
      await lock.acquire('connect-first');
      const start = performance.now();
      const [guard] = await lock.acquire('half-second');
      const pttl = await keys.pttl(guard!.key);
      // At most 500, and short of 500 by no more than the time these two calls took.
      const elapsed = performance.now() - start;
      expect(pttl).toBeLessThanOrEqual(500);
      expect(pttl).toBeGreaterThanOrEqual(500 - Math.ceil(elapsed) - 1);
    });

    it('ttl 0.0001 gives 1 ms: the key is at most 1 ms from gone', async () => {
      const [guard] = await worker({ ttl: 0.0001 }).acquire('tenth-of-a-ms');
      expect(guard).toBeDefined();
      expect([1, 0, -2]).toContain(await keys.pttl(guard!.key));
      await untilExpired(keys, guard!.key, 1000);
    });

    it('a per-call ttl overrides the service ttl for that lock', async () => {
      const lock = worker({ ttl: 60 });
      const [guard] = await lock.acquire('per-call', 2);
      const pttl = await keys.pttl(guard!.key);
      expect(pttl).toBeGreaterThan(1500);
      expect(pttl).toBeLessThanOrEqual(2000);
    });

    it.each([0, -1, NaN, Infinity, '1e3', 'abc'])(
      'a per-call ttl of %j returns (undefined, redis_ttl_invalid) and takes nothing',
      async (ttl) => {
        const [guard, error] = await worker().acquire('bad-per-call', ttl as number);
        expect(guard).toBeUndefined();
        expect(error).toBeInstanceOf(LockError);
        expect(error).toMatchObject({
          code: 'redis_ttl_invalid',
          message: 'cache_lock ttl must be a positive number of seconds',
        });
      },
    );
  });

  describe('extend(guard, ttl): PEXPIRE only while the stored token is the guard’s', () => {
    it('[true, undefined] moves the PTTL out to the new ttl', async () => {
      const lock = worker({ ttl: 1 });
      const [guard] = await lock.acquire('extend-out');
      expect(await keys.pttl(guard!.key)).toBeLessThanOrEqual(1000);
      expect(await lock.extend(guard!, 30)).toEqual([true, undefined]);
      expect(await keys.pttl(guard!.key)).toBeGreaterThan(25_000);
      expect(await keys.get(guard!.key)).toBe(guard!.token);
    });

    it('without a ttl it uses the service ttl; it can also shorten', async () => {
      const lock = worker({ ttl: 20 });
      const [guard] = await lock.acquire('extend-default', 1);
      expect(await lock.extend(guard!)).toEqual([true, undefined]);
      expect(await keys.pttl(guard!.key)).toBeGreaterThan(15_000);
      expect(await lock.extend(guard!, 0.5)).toEqual([true, undefined]);
      expect(await keys.pttl(guard!.key)).toBeLessThanOrEqual(500);
    });

    it('[false, undefined] after release', async () => {
      const lock = worker();
      const [guard] = await lock.acquire('extend-released');
      await lock.release(guard!);
      expect(await lock.extend(guard!, 30)).toEqual([false, undefined]);
      expect(await keys.exists(guard!.key)).toBe(0);
    });

    it('[false, undefined] after expiry', async () => {
      const lock = worker({ ttl: 0.2 });
      const [guard] = await lock.acquire('extend-expired');
      await untilExpired(keys, guard!.key, 5000);
      expect(await lock.extend(guard!, 30)).toEqual([false, undefined]);
      expect(await keys.exists(guard!.key)).toBe(0);
    });

    it('[false, undefined] when another worker took the key; its expiry is not touched', async () => {
      const [a, b] = [worker({ ttl: 0.2 }), worker({ ttl: 5 })];
      const [old] = await a.acquire('extend-retaken');
      await untilExpired(keys, old!.key, 5000);
      const [current] = await b.acquire('extend-retaken');
      expect(await a.extend(old!, 60)).toEqual([false, undefined]);
      expect(await keys.pttl(old!.key)).toBeLessThanOrEqual(5000);
      expect(await keys.get(old!.key)).toBe(current!.token);
    });

    it('an invalid ttl returns (false, redis_ttl_invalid) and leaves the expiry alone', async () => {
      const lock = worker({ ttl: 30 });
      const [guard] = await lock.acquire('extend-bad-ttl');
      for (const ttl of [0, -5, NaN, '1e3']) {
        const [extended, error] = await lock.extend(guard!, ttl as number);
        expect(extended).toBe(false);
        expect(error?.code).toBe('redis_ttl_invalid');
      }
      expect(await keys.pttl(guard!.key)).toBeGreaterThan(25_000);
    });

    it('an invalid guard returns (false, redis_invalid_guard)', async () => {
      const [extended, error] = await worker().extend({} as LockGuard, 30);
      expect(extended).toBe(false);
      expect(error?.code).toBe('redis_invalid_guard');
    });
  });
});

describe('ttl and extend on an ioredis client', () => {
  it.each([
    [60, 60_000],
    ['30', 30_000],
    [0.5, 500],
    [1.5, 1500],
    [0.001, 1],
    [0.0009, 1],
    [0.0001, 1],
  ])('ttl %j is sent as PX %d', async (ttl, ms) => {
    const client = recordingClient(server.client());
    const lock = new RedisLockService({ redis: client, namespace: NS, ttl: ttl as number });
    const [guard] = await lock.acquire(`sent-${String(ttl)}`);
    expect(lastArgv(client)).toBe(`${ms} ${guard!.token}`);
    expect(await admin.pttl(guard!.key)).toBeLessThanOrEqual(ms);
    await lock.release(guard!);
  });

  it('[false, error] when Redis fails', async () => {
    const down = await startRedis();
    const client = failFastClient(down);
    const lock = new RedisLockService({ redis: client, namespace: NS });
    const [guard] = await lock.acquire('extend-down');
    await down.stop();
    const [extended, error] = await lock.extend(guard!, 30);
    expect(extended).toBe(false);
    expect(error).toBeInstanceOf(LockError);
    expect(error!.code).toBe('redis_extend_failed');
    expect(error!.message).toBe(`Redis lock extend failed: ${(error!.cause as Error).message}`);
  });

  it('[false, error] when the factory gives no client', async () => {
    const lock = new RedisLockService({ redis: () => undefined, namespace: NS });
    const [extended, error] = await lock.extend({ key: rkey(NS, 'k'), token: 't' });
    expect(extended).toBe(false);
    expect(error?.code).toBe('redis_no_client');
  });
});
