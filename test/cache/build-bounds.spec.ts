import { deserialize, serialize } from 'node:v8';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  LockError,
  RedisLockService,
  type BufferCacheOptions,
  type ResultSerializer,
} from '../../lib/index.js';
import { MemoryLogger, deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * What bounds one cache build on a real Redis: `hardTimeout` (a factory that never settles holds
 * no lock for ever), `maxValueBytes` (a value too large is refused, nothing stored), and a miss
 * returning what a hit will (the value as the serializer gives it back).
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

let n = 0;
const key = (): string => `bounds:${++n}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A cache as one worker process has it: its own client, lock and log. */
function worker(options: ConstructorParameters<typeof BufferCache>[0]['options'] = {}): {
  cache: BufferCache;
  lock: RedisLockService;
  logger: MemoryLogger;
} {
  const logger = new MemoryLogger();
  const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:bounds:' });
  const cache = new BufferCache({ lock, options: { logger, ...options } });
  return { cache, lock, logger };
}

/** The error a promise rejects with (it must reject). */
async function rejection(promise: Promise<unknown>): Promise<LockError> {
  try {
    await promise;
  } catch (error) {
    return error as LockError;
  }
  throw new Error('resolved');
}

describe('hardTimeout: a build that never settles', () => {
  it('rejects every caller of the build with cache_build_timeout, releases the lock, and stores no late value', async () => {
    const { cache, lock } = worker();
    const k = key();
    const never = deferred<string>();
    let builds = 0;
    const options: BufferCacheOptions = { hardTimeout: 0.3, lockTimeout: 20 };
    const callers = Array.from({ length: 5 }, () =>
      rejection(
        cache.getOrSet(
          k,
          () => {
            builds++;
            return never.promise;
          },
          options,
        ),
      ),
    );
    const lockKey = lock.redisKey(k);
    await until(async () => (await admin.exists(lockKey)) === 1);
    const errors = await Promise.all(callers);
    expect(builds).toBe(1);
    for (const error of errors) {
      expect(error).toBeInstanceOf(LockError);
      expect(error.code).toBe('cache_build_timeout');
      expect(error.message).toBe(
        `Building the value for ${k} took more than 0.3 s (hardTimeout): its lock is released, and a late value is not stored`,
      );
    }
    expect(await admin.exists(lockKey)).toBe(0);
    // The late value is dropped: no entry appears.
    never.resolve('late');
    await sleep(50);
    expect(await cache.get(k)).toBeUndefined();
    expect(await admin.keys('*bounds*')).toEqual([]);
    // The next call builds anew.
    expect(await cache.getOrSet(k, () => 'next', options)).toBe('next');
  });

  it("another process's waiter is released by the lock release and builds it itself", async () => {
    const a = worker();
    const b = worker();
    const k = key();
    const order: string[] = [];
    const stuck = rejection(
      a.cache.getOrSet(k, () => new Promise(() => order.push('a builds')), {
        hardTimeout: 0.3,
        lockTimeout: 20,
      }),
    );
    await until(async () => (await admin.exists(a.lock.redisKey(k))) === 1);
    const waiter = b.cache.getOrSet(
      k,
      () => {
        order.push('b builds');
        return 'b';
      },
      { lockTimeout: 20 },
    );
    const error = await stuck;
    order.push('a rejected');
    expect(error.code).toBe('cache_build_timeout');
    expect(await waiter).toBe('b');
    expect(order).toEqual(['a builds', 'a rejected', 'b builds']);
    expect(await a.cache.getOrSet(k, () => 'not built')).toBe('b');
  });

  it('a refresh past hardTimeout fails, is logged, and the stale value is still served', async () => {
    const { cache, logger } = worker();
    const k = key();
    await cache.set(k, 'old', { ttl: 0.05, grace: 60 });
    await sleep(80);
    const options = { ttl: 0.05, grace: 60, hardTimeout: 0.2 };
    expect(await cache.getOrSet(k, () => new Promise(() => {}), options)).toBe('old');
    await until(() => logger.at('warn').some((line) => line.includes('hardTimeout')));
    expect(logger.at('warn')).toContain(
      `Refreshing a stale cache entry failed: Building the value for ${k} took more than 0.2 s (hardTimeout): its lock is released, and a late value is not stored; serving it stale, next try in 1 s`,
    );
    expect(await cache.get(k)).toBe('old');
  });

  it('has a finite default, taken from cacheDefaults, and is refused unless positive seconds', async () => {
    const { cache } = worker({ cacheDefaults: { hardTimeout: 0.2 } });
    const k = key();
    const error = await rejection(cache.getOrSet(k, () => new Promise(() => {})));
    expect(error.message).toContain('took more than 0.2 s (hardTimeout)');
    for (const hardTimeout of [0, -1, 'soon', 3_000_000]) {
      const refused = await rejection(cache.getOrSet(k, () => 1, { hardTimeout } as never));
      expect(refused).toBeInstanceOf(BufferLockConfigError);
      expect(refused.code).toBe('cache_hard_timeout_invalid');
    }
  });
});

describe('maxValueBytes: a value larger than it once serialized', () => {
  it('is refused with cache_value_too_large: the caller gets it, nothing is stored, the lock is let go', async () => {
    const { cache, lock } = worker();
    const k = key();
    // '"' + 6 × 'é' (2 bytes each) + '"': 14 bytes in 8 UTF-16 units.
    const error = await rejection(cache.getOrSet(k, () => 'éééééé', { maxValueBytes: 13 }));
    expect(error).toBeInstanceOf(LockError);
    expect(error.code).toBe('cache_value_too_large');
    expect(error.message).toBe(
      `The value for ${k} is 14 bytes encoded, more than maxValueBytes (13): it was not cached`,
    );
    expect(await cache.get(k)).toBeUndefined();
    expect(await admin.exists(lock.redisKey(k))).toBe(0);
    expect(await cache.getOrSet(k, () => 'éééééé', { maxValueBytes: 14 })).toBe('éééééé');
  });

  it('set() is refused too, and the module default (cacheDefaults) applies', async () => {
    const { cache } = worker({ cacheDefaults: { maxValueBytes: 100 } });
    const k = key();
    const big = 'x'.repeat(200);
    const error = await rejection(cache.set(k, big));
    expect(error.code).toBe('cache_value_too_large');
    expect(error.message).toContain('is 202 bytes encoded, more than maxValueBytes (100)');
    expect(await cache.get(k)).toBeUndefined();
    await cache.set(k, big, { maxValueBytes: 202 });
    expect(await cache.get(k)).toBe(big);
  });

  it('a refresh with a value too large logs it and serves the stale entry', async () => {
    const { cache, logger } = worker();
    const k = key();
    await cache.set(k, 'small', { ttl: 0.05, grace: 60 });
    await sleep(80);
    const options = { ttl: 0.05, grace: 60, maxValueBytes: 10 };
    expect(await cache.getOrSet(k, () => 'x'.repeat(50), options)).toBe('small');
    await until(() => logger.at('warn').length > 0);
    expect(logger.at('warn')).toEqual([
      `Refreshing a stale cache entry failed: The value for ${k} is 52 bytes encoded, more than maxValueBytes (10): it was not cached; serving it stale, next try in 1 s`,
    ]);
    expect(await cache.get(k)).toBe('small');
  });

  it('defaults to 4 MiB, and is refused unless a positive whole number', async () => {
    const { cache } = worker();
    const k = key();
    const limit = 4 * 1024 * 1024;
    const error = await rejection(cache.getOrSet(k, () => 'x'.repeat(limit - 1)));
    expect(error.message).toContain(`is ${limit + 1} bytes encoded, more than maxValueBytes`);
    expect((await cache.getOrSet(k, () => 'x'.repeat(limit - 2))).length).toBe(limit - 2);
    for (const maxValueBytes of [0, -5, 1.5, '100', Number.NaN]) {
      const refused = await rejection(cache.getOrSet(key(), () => 1, { maxValueBytes } as never));
      expect(refused).toBeInstanceOf(BufferLockConfigError);
      expect(refused.code).toBe('cache_max_value_bytes_invalid');
    }
  });
});

class Report {
  constructor(
    readonly id: string,
    readonly at: Date,
  ) {}
  title(): string {
    return `report ${this.id}`;
  }
}

describe('a miss returns what a hit will: the value as the serializer gives it back', () => {
  it('a class instance with a Date has the same shape on the first call as on the second', async () => {
    const { cache } = worker();
    const k = key();
    const at = new Date('2024-05-01T10:00:00.000Z');
    const [first, joined] = await Promise.all([
      cache.getOrSet(k, async () => new Report('a', at)),
      cache.getOrSet(k, async () => new Report('b', at)),
    ]);
    const second = await cache.getOrSet(k, async () => new Report('c', at));
    expect(first).not.toBeInstanceOf(Report);
    expect(first).toStrictEqual({ id: 'a', at: '2024-05-01T10:00:00.000Z' });
    expect(joined).toStrictEqual(first);
    expect(second).toStrictEqual(first);
  });

  it('with a serializer that revives dates, the miss has the Date too', async () => {
    const serializer = {
      serialize: (value: unknown): string => JSON.stringify(value),
      deserialize: (text: string): unknown =>
        JSON.parse(text, (_key, value: unknown) =>
          typeof value === 'string' && /^\d{4}-\d\d-\d\dT/.test(value) ? new Date(value) : value,
        ),
    };
    const { cache } = worker({ serializer });
    const k = key();
    const at = new Date('2024-05-01T10:00:00.000Z');
    const first = await cache.getOrSet(k, () => ({ at }));
    const second = await cache.getOrSet(k, () => ({ at: new Date(0) }));
    expect(first.at).toBeInstanceOf(Date);
    expect(first.at).not.toBe(at);
    expect(second).toStrictEqual(first);
  });

  it("with node:v8's structured serialization (docs/cache.md), a Date, a Map and a BigInt come back as they were", async () => {
    const serializer: ResultSerializer = {
      serialize: (value) => serialize(value).toString('base64'),
      deserialize: (text) => deserialize(Buffer.from(text, 'base64')),
    };
    const { cache } = worker({ serializer });
    const k = key();
    const value = { at: new Date(0), counts: new Map([['a', 1n]]) };
    const first = await cache.getOrSet(k, () => value);
    const second = await cache.getOrSet(k, () => ({ at: new Date(1), counts: new Map() }));
    expect(first).not.toBe(value);
    expect(first).toStrictEqual(value);
    expect(second).toStrictEqual(value);
  });
});

/** A JSON serializer that counts its decodes. */
const counting = (): { serializer: ResultSerializer; parsed: () => number } => {
  let parsed = 0;
  const serializer: ResultSerializer = {
    serialize: (value) => JSON.stringify(value),
    deserialize: (text) => {
      parsed++;
      return JSON.parse(text) as unknown;
    },
  };
  return { serializer, parsed: () => parsed };
};

describe('set() parses back only what is read', () => {
  it('stores the entry without decoding it; the next read decodes it once', async () => {
    const { serializer, parsed } = counting();
    const { cache } = worker({ serializer });
    const k = key();
    await cache.set(k, { rows: [1, 2, 3] }, { ttl: 60 });
    expect(parsed()).toBe(0);
    expect(await cache.get(k)).toStrictEqual({ rows: [1, 2, 3] });
    expect(parsed()).toBe(1);
  });

  it('with l1 it decodes once, for the copy l1 keeps', async () => {
    const { serializer, parsed } = counting();
    const { cache } = worker({ serializer, l1: { maxAge: 5 } });
    await cache.set(key(), { rows: [1] }, { ttl: 60 });
    expect(parsed()).toBe(1);
  });
});
