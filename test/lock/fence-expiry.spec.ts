import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { MemoryClient } from '../../lib/memory/memory-client.js';
import { MemoryKeyspace } from '../../lib/memory/keyspace.js';
import { fenceKey } from '../../lib/redis/keys.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * A fence counter expires once its key has not been acquired for the lock's ttl + 1 s, and the
 * numbers of a key never go back: a new counter starts at the server's TIME in µs.
 */

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function untilGone(key: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while ((await server.client().exists(key)) === 1) {
    if (Date.now() > deadline) throw new Error(`${key} still there`);
    await sleep(50);
  }
}

describe('fence counter on a real redis-server', () => {
  it('has a PTTL of the lock ttl + 1 s, renewed by each acquire', async () => {
    const lock = new RedisLockService({
      redis: server.client(),
      namespace: 'fx:pttl:',
      ttl: 30,
      fencing: true,
    });
    const [guard] = await lock.acquire('k');
    const life = await server.client().pttl(fenceKey(guard!.key));
    expect(life).toBeGreaterThan(30_000);
    expect(life).toBeLessThanOrEqual(31_000);
    await lock.release(guard!);
    const [short] = await lock.acquire('k', 2);
    const renewed = await server.client().pttl(fenceKey(short!.key));
    expect(renewed).toBeGreaterThan(2000);
    expect(renewed).toBeLessThanOrEqual(3000);
  });

  it('after the counter expired, the next number is still greater than the last', async () => {
    const lock = new RedisLockService({
      redis: server.client(),
      namespace: 'fx:expire:',
      fencing: true,
    });
    const fences: number[] = [];
    // Back to back, so that the counter may run ahead of the clock before it expires.
    for (let i = 0; i < 200; i++) {
      const [guard] = await lock.acquire('k', 0.05);
      fences.push(guard!.fence!);
      await lock.release(guard!);
    }
    const key = fenceKey(lock.redisKey('k'));
    expect(await server.client().pttl(key)).toBeGreaterThan(0);
    await untilGone(key);
    const [next] = await lock.acquire('k', 0.05);
    fences.push(next!.fence!);
    expect(fences.every((f, i) => Number.isSafeInteger(f) && f > (fences[i - 1] ?? 0))).toBe(true);
    expect(Number(await server.client().get(key))).toBe(next!.fence);
  });

  it('many distinct keys leave no fence counter once their bound has passed', async () => {
    const client = server.client();
    const lock = new RedisLockService({ redis: client, namespace: 'fx:many:', fencing: true });
    for (let i = 0; i < 500; i++) {
      const [guard] = await lock.acquire(`k${i}`, 0.05);
      await lock.release(guard!);
    }
    const count = async (): Promise<number> => (await client.keys('{fx:many:*')).length;
    expect(await count()).toBe(500);
    await untilGone(fenceKey(lock.redisKey('k499')));
    expect(await count()).toBe(0);
  });
});

describe('fence counter on memory://', () => {
  it('expires ttl + 1 s after the last acquire; the next starts above the last number', async () => {
    let now = 1_700_000_000_000;
    const client = new MemoryClient(new MemoryKeyspace(() => now));
    const lock = new RedisLockService({ redis: client, fencing: true, ttl: 1 });
    const fences: number[] = [];
    for (let i = 0; i < 5; i++) {
      const [guard] = await lock.acquire('k');
      fences.push(guard!.fence!);
      await lock.release(guard!);
    }
    // The clock stood still: one more each time, from the TIME in µs.
    expect(fences).toEqual([0, 1, 2, 3, 4].map((n) => now * 1000 + n));
    const key = fenceKey(lock.redisKey('k'));
    now += 2000;
    expect(await client.exists(key)).toBe(1);
    now += 1;
    expect(await client.exists(key)).toBe(0);
    const [next] = await lock.acquire('k');
    expect(next!.fence).toBe(now * 1000);
    expect(next!.fence).toBeGreaterThan(fences[4]!);
  });
});
