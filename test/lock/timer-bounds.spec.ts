import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  BufferLockModule,
  RedisLockService,
  SingleFlightEngine,
} from '../../lib/index.js';
import { commandStats } from '../support/command-stats.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

// Node runs a timer set past 2^31 − 1 ms after 1 ms: a lock's ttl, wait and hold stay below it.
const TIMER_LIMIT_S = Math.floor((2 ** 31 - 1) / 1000);
const DAY_S = 86_400;

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const bootError = async (options: object): Promise<BufferLockConfigError> => {
  const module = Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: 'memory://', ...options })],
  });
  const error: unknown = await module.compile().then(
    () => undefined,
    (thrown: unknown) => thrown,
  );
  expect(error).toBeInstanceOf(BufferLockConfigError);
  return error as BufferLockConfigError;
};

describe('a lock time longer than a timer can wait', () => {
  it('a ttl, lockTimeout or maxHold past about 24.8 days is refused at bootstrap, each with its own message', async () => {
    expect((await bootError({ ttl: TIMER_LIMIT_S + 1 })).code).toBe('redis_ttl_invalid');
    expect((await bootError({ ttl: 40 * DAY_S, lockTimeout: 30 * DAY_S })).code).toBe(
      'redis_ttl_invalid',
    );
    const wait = await bootError({ ttl: TIMER_LIMIT_S, lockTimeout: TIMER_LIMIT_S + 1 });
    expect(wait.violations.map((violation) => violation.code)).toContain('lock_timeout_invalid');
    expect((await bootError({ maxHold: 10 * 365 * DAY_S })).code).toBe('max_hold_invalid');
    expect(() => new RedisLockService({ redis: 'memory://', ttl: 10 * 365 * DAY_S })).toThrow(
      BufferLockConfigError,
    );
    // The longest a timer can hold is still a ttl.
    const lock = new RedisLockService({ redis: 'memory://', ttl: TIMER_LIMIT_S });
    expect(lock.ttl).toBe(TIMER_LIMIT_S);
  });

  it('an acquire or extend with such a ttl answers redis_ttl_invalid and sends nothing', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'timer:call:' });
    await admin.config('RESETSTAT');
    const [guard, error] = await lock.acquire('report', 30 * DAY_S);
    expect(guard).toBeUndefined();
    expect(error?.code).toBe('redis_ttl_invalid');
    const [held] = await lock.acquire('report');
    const [extended, refused] = await lock.extend(held!, 30 * DAY_S);
    expect(extended).toBe(false);
    expect(refused?.code).toBe('redis_ttl_invalid');
    expect(await admin.pttl(lock.redisKey('report'))).toBeLessThanOrEqual(60_000);
    await lock.release(held!);
  });

  it('a waiter on a lock with 30 days left sends no more commands than on one with 30 s left', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'timer:wait:' });
    const engine = new SingleFlightEngine({ lock, options: { lockTimeout: 1 } });
    // A holder elsewhere (another deployment) set the lock with this much left.
    const commandsWhileWaiting = async (key: string, pttlMs: number): Promise<number> => {
      await admin.set(lock.redisKey(key), 'a-token-of-another-holder', 'PX', pttlMs);
      await admin.config('RESETSTAT');
      await engine.run(key, () => 'built').catch(() => undefined);
      const stats = await commandStats(admin);
      return [...stats].reduce(
        (sum, [name, calls]) =>
          name === 'config|resetstat' || name === 'info' ? sum : sum + calls,
        0,
      );
    };
    const short = await commandsWhileWaiting('short', 30_000);
    const long = await commandsWhileWaiting('long', 30 * DAY_S * 1000);
    expect(long).toBeLessThanOrEqual(short + 2);
    await engine.close();
  });
});
