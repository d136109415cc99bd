import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

describe('smoke', () => {
  it('acquires and releases', async () => {
    const lock = new RedisLockService({ redis: () => server.client() });
    const [guard, error] = await lock.acquire('x');
    expect(error).toBeUndefined();
    expect(guard?.token).toHaveLength(32);
    expect(await lock.acquire('x')).toEqual([undefined, undefined]);
    expect(await lock.release(guard!)).toEqual([true, undefined]);
  });
});
