import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

const NS = 'tokens-spec:';
let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const TOKEN = /^[A-Za-z0-9_-]{32}$/; // 32 characters of the base64url alphabet

describe('token: a random 32-character string made for each successful acquire', () => {
  it('is 32 characters of the base64url alphabet, and is what Redis holds', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
    const [guard] = await lock.acquire('one');
    expect(guard!.token).toMatch(TOKEN);
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    await lock.release(guard!);
  });

  it('is fresh for every acquire of the same key', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
    const tokens = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const [guard] = await lock.acquire('same-key');
      tokens.add(guard!.token);
      await lock.release(guard!);
    }
    expect(tokens.size).toBe(200);
  });

  it('is unique over 100 000 acquires', async () => {
    const lock = new RedisLockService({
      redis: () => server.client({ enableAutoPipelining: true }),
      namespace: NS,
      ttl: 60,
    });
    const TOTAL = 100_000;
    const BATCH = 2_000;
    const tokens = new Set<string>();
    let malformed = 0;
    for (let start = 0; start < TOTAL; start += BATCH) {
      const results = await Promise.all(
        Array.from({ length: BATCH }, (_, i) => lock.acquire(`unique-${start + i}`)),
      );
      for (const [guard, error] of results) {
        expect(error).toBeUndefined();
        if (!TOKEN.test(guard!.token)) malformed++;
        tokens.add(guard!.token);
      }
    }
    expect(malformed).toBe(0);
    expect(tokens.size).toBe(TOTAL);
    // Every one of them was really taken in Redis.
    expect(await admin.dbsize()).toBe(TOTAL);
    await admin.flushdb();
  }, 60_000);
});
