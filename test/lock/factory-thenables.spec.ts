/* oxlint-disable unicorn/no-thenable -- thenables of every kind are what is tested */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, type RedisClientFactory } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * A factory may return any thenable, not only a Promise: whatever it does, the first call is
 * bounded by `connectTimeout`, as with a Promise that never settles.
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

type Resolve = (value: unknown) => void;

/** A thenable that resolves to itself: a Promise adopting it never stops adopting it. */
const selfResolving = (): PromiseLike<unknown> => {
  const thenable = {
    then(resolve: Resolve): void {
      resolve(thenable);
    },
  };
  return thenable as unknown as PromiseLike<unknown>;
};
/** Each step resolves to a new thenable. */
const endless = (): PromiseLike<unknown> =>
  ({ then: (resolve: Resolve) => resolve(endless()) }) as unknown as PromiseLike<unknown>;

const NEVER_SETTLING: Record<string, () => unknown> = {
  'a thenable whose then() never calls back': () => ({ then() {} }),
  'a function with a then()': () => Object.assign(() => {}, { then() {} }),
  'a thenable that resolves to itself': selfResolving,
  'a thenable that resolves to a new thenable each time': endless,
  'a thenable that resolves to a Promise that never settles': () => ({
    then: (resolve: Resolve) => resolve(new Promise(() => {})),
  }),
};

describe('a factory returning a thenable that never settles', () => {
  it.each(Object.entries(NEVER_SETTLING))(
    '%s: the first lock call rejects with redis_connect_timeout after connectTimeout',
    async (_name, made) => {
      const lock = new RedisLockService({
        redis: made as unknown as RedisClientFactory,
        connectTimeout: 0.3,
      });
      const [guard, error] = await lock.acquire('thenable');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject({
        code: 'redis_connect_timeout',
        message: 'Redis lock failed: Redis client factory gave no client within 0.3 s',
      });
    },
  );
});

describe('a factory returning a thenable that gives a client', () => {
  it('a chain of thenables ending in a client: the lock is taken on the real server', async () => {
    const client = server.client();
    const step = (left: number): unknown =>
      left === 0 ? client : { then: (resolve: Resolve) => resolve(step(left - 1)) };
    const lock = new RedisLockService({
      redis: (() => step(3)) as unknown as RedisClientFactory,
      connectTimeout: 2,
    });
    const [guard, error] = await lock.acquire('chain');
    expect(error).toBeUndefined();
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    await lock.release(guard!);
  });

  it('a thenable whose then() throws, or rejects: the call fails with that error', async () => {
    for (const made of [
      {
        then() {
          throw new Error('then threw');
        },
      },
      { then: (_: Resolve, reject: Resolve) => reject(new Error('then threw')) },
    ]) {
      const lock = new RedisLockService({
        redis: (() => made) as unknown as RedisClientFactory,
        connectTimeout: 2,
      });
      const [guard, error] = await lock.acquire('throws');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject({ code: 'redis_lock_failed' });
      expect(error?.message).toContain('then threw');
    }
  });
});
