import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusedWith } from '../support/refused.js';
import { fenceKey } from '../../lib/redis/keys.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

describe('fencing: off by default', () => {
  it('the guard has no fence and no counter key is made', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'fe:off:' });
    const [guard] = await lock.acquire('k');
    expect(guard).toEqual({ key: lock.redisKey('k'), token: expect.any(String) });
    expect('fence' in guard!).toBe(false);
    expect(await server.client().exists(fenceKey(guard!.key))).toBe(0);
  });

  it('fencing must be a boolean', () => {
    expect(
      () => new RedisLockService({ redis: server.client(), fencing: 'yes' as unknown as boolean }),
    ).toThrow(
      expect.objectContaining({
        name: 'BufferLockConfigError',
        code: 'redis_fencing_invalid',
        message: refusedWith('cache_lock fencing must be true or false'),
      }),
    );
  });
});

describe('fencing: acquired → guard.fence from the counter in the lock’s slot', () => {
  it('numbers strictly increase across holders with separate connections (workers)', async () => {
    const workers = Array.from(
      { length: 3 },
      () => new RedisLockService({ redis: server.client(), namespace: 'fe:inc:', fencing: true }),
    );
    const fences: number[] = [];
    for (let round = 0; round < 30; round++) {
      // All three race; exactly one wins each round.
      const results = await Promise.all(workers.map((w) => w.acquire('report')));
      const winners = results.filter(([guard]) => guard !== undefined);
      expect(winners).toHaveLength(1);
      const [guard] = winners[0]!;
      fences.push(guard!.fence!);
      await workers[round % 3]!.release(guard!);
    }
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!);
    expect(Number(await server.client().get(fenceKey(workers[0]!.redisKey('report'))))).toBe(
      fences.at(-1),
    );
  });

  it('a busy acquire does not count; an expired holder’s successor gets a larger number', async () => {
    const lock = new RedisLockService({
      redis: server.client(),
      namespace: 'fe:exp:',
      fencing: true,
    });
    const [first] = await lock.acquire('k', 0.1);
    expect(await lock.acquire('k')).toEqual([undefined, undefined]);
    expect(await lock.acquire('k')).toEqual([undefined, undefined]);
    while ((await server.client().exists(first!.key)) === 1)
      await new Promise((r) => setTimeout(r, 20));
    const [second] = await lock.acquire('k');
    expect(second!.fence).toBeGreaterThan(first!.fence!);
    // The counter lives the lock's ttl + 1 s from its last acquire (test/lock/fence-expiry.spec.ts).
    expect(await server.client().pttl(fenceKey(first!.key))).toBeGreaterThan(0);
  });

  it('each key has its own counter', async () => {
    const lock = new RedisLockService({
      redis: server.client(),
      namespace: 'fe:keys:',
      fencing: true,
    });
    const [a] = await lock.acquire('a');
    const [b] = await lock.acquire('b');
    // Each starts at the server's TIME in µs: positive safe integers, neither counting the other.
    for (const fence of [a!.fence!, b!.fence!]) {
      expect(Number.isSafeInteger(fence) && fence > 0).toBe(true);
    }
    const [keyA, keyB] = [fenceKey(a!.key), fenceKey(b!.key)];
    expect([await server.client().get(keyA), await server.client().get(keyB)]).toEqual([
      String(a!.fence),
      String(b!.fence),
    ]);
  });
});
