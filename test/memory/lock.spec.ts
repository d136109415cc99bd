import { Logger } from '@nestjs/common';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BufferLockConfigError, ENGLISH_MESSAGES, RedisLockService } from '../../lib/index.js';
import { MemoryClient } from '../../lib/memory/memory-client.js';
import { fenceKey } from '../../lib/redis/keys.js';
import { collectEscapes, settle } from '../support/escapes.js';

/**
 * The lock on `memory://`: no Redis at all, the same answers as on Redis, for the callers of one
 * process.
 */

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const escaped = collectEscapes();
let names = 0;
/** A keyspace of its own for each test, shared by every service made from the URL. */
const freshUrl = (): `memory://${string}` => `memory://lock-spec-${++names}`;

/** The memory client a service runs on, to look at its keys as a test of Redis looks at Redis. */
const clientOf = (lock: RedisLockService): MemoryClient => lock.redis as MemoryClient;

afterEach(() => vi.restoreAllMocks());

describe("new RedisLockService({ redis: 'memory://' })", () => {
  it('logs once, when made, that it coordinates this process only', () => {
    const log = vi.spyOn(Logger.prototype, 'log').mockImplementation(() => {});
    const lock = new RedisLockService({ redis: 'memory://' });
    expect(log.mock.calls).toEqual([[ENGLISH_MESSAGES.memory_backend]]);
    expect(ENGLISH_MESSAGES.memory_backend).toMatch(/this process only/);
    void lock.acquire('k');
    expect(log).toHaveBeenCalledTimes(1);
  });

  it('logs it in the words of the messages given', () => {
    const log = vi.spyOn(Logger.prototype, 'log').mockImplementation(() => {});
    const lock = new RedisLockService({
      redis: 'memory://',
      messages: { memory_backend: 'nur dieser Prozess' },
    });
    expect(log.mock.calls).toEqual([['nur dieser Prozess']]);
    expect(lock.messageOverrides).toEqual({ memory_backend: 'nur dieser Prozess' });
  });

  it.each([
    ['memory://user:secret@host', '"memory://user:***@host"'],
    ['memory:/', '"memory:/"'],
    ['memory://a/b', '"memory://a/b"'],
    ['MEMORY://', '"MEMORY://"'],
  ])('refuses %s with redis_client_invalid, showing it as %s', (redis, shown) => {
    const error = (() => {
      try {
        return new RedisLockService({ redis: redis as 'memory://' });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).violations).toEqual([
      {
        property: 'redis',
        code: 'redis_client_invalid',
        message: `${ENGLISH_MESSAGES.redis_client_invalid} (redis: ${shown})`,
        values: [{ name: 'redis', value: shown, isDefault: false }],
      },
    ]);
  });
});

/** Keeps the start-up line of each service out of the test output. */
const quiet = (): void => void vi.spyOn(Logger.prototype, 'log').mockImplementation(() => {});

describe('the lock on memory://', () => {
  it('takes a free key with a CSPRNG token for the ttl, and is busy for everyone, the holder too', async () => {
    quiet();
    const url = freshUrl();
    const [holder, other] = [
      new RedisLockService({ redis: url, ttl: 30 }),
      new RedisLockService({ redis: url }),
    ];
    const [guard, error] = await holder.acquire('report');
    expect(error).toBeUndefined();
    expect(guard).toEqual({
      key: holder.redisKey('report'),
      token: expect.stringMatching(/^[\w-]{32}$/),
    });
    const client = clientOf(holder);
    expect(await client.get(guard!.key)).toBe(guard!.token);
    expect(await client.pttl(guard!.key)).toBeGreaterThan(29_000);
    expect(await client.pttl(guard!.key)).toBeLessThanOrEqual(30_000);
    expect(await other.acquire('report')).toEqual([undefined, undefined]);
    expect(await holder.acquire('report')).toEqual([undefined, undefined]);
  });

  it('of 50 services racing for one key, exactly one gets it; 1 000 acquires give 1 000 distinct tokens', async () => {
    quiet();
    const url = freshUrl();
    const services = Array.from({ length: 50 }, () => new RedisLockService({ redis: url }));
    const results = await Promise.all(services.map((s) => s.acquire('race')));
    expect(results.filter(([guard]) => guard !== undefined)).toHaveLength(1);
    expect(results.filter(([g, e]) => g === undefined && e === undefined)).toHaveLength(49);
    const lock = services[0]!;
    const guards = await Promise.all(Array.from({ length: 1000 }, (_, i) => lock.acquire(`t${i}`)));
    expect(new Set(guards.map(([guard]) => guard!.token)).size).toBe(1000);
  });

  it('expires a lock after its ttl by itself, and the key is free again', async () => {
    quiet();
    const url = freshUrl();
    const [short, long] = [
      new RedisLockService({ redis: url, ttl: 0.1 }),
      new RedisLockService({ redis: url }),
    ];
    const [first] = await short.acquire('expires');
    expect(await long.acquire('expires')).toEqual([undefined, undefined]);
    await sleep(130);
    expect(await clientOf(short).exists(first!.key)).toBe(0);
    const [second] = await long.acquire('expires');
    expect(second!.token).not.toBe(first!.token);
  });

  it('release deletes only its own lock: a stale guard leaves the next holder alone', async () => {
    quiet();
    const lock = new RedisLockService({ redis: freshUrl(), ttl: 0.05 });
    const [stale] = await lock.acquire('k');
    await sleep(70);
    const [current] = await lock.acquire('k');
    expect(await lock.release(stale!)).toEqual([true, undefined]);
    expect(await clientOf(lock).get(current!.key)).toBe(current!.token);
    expect(await lock.release(current!)).toEqual([true, undefined]);
    expect(await clientOf(lock).exists(current!.key)).toBe(0);
  });

  it('extend pushes the expiry out for the holder only', async () => {
    quiet();
    const lock = new RedisLockService({ redis: freshUrl(), ttl: 0.2 });
    const [guard] = await lock.acquire('k');
    expect(await lock.extend(guard!, 30)).toEqual([true, undefined]);
    expect(await clientOf(lock).pttl(guard!.key)).toBeGreaterThan(29_000);
    expect(await lock.extend({ key: guard!.key, token: 'forged' }, 60)).toEqual([false, undefined]);
    expect(await clientOf(lock).pttl(guard!.key)).toBeLessThanOrEqual(30_000);
    expect(await lock.release({ key: 'outside:namespace', token: guard!.token })).toEqual([
      false,
      expect.objectContaining({ code: 'redis_invalid_guard' }),
    ]);
  });

  it('numbers holders with fencing: each acquire of a key gets a larger number; the counter expires ttl + 1 s after', async () => {
    quiet();
    const lock = new RedisLockService({ redis: freshUrl(), fencing: true });
    const fences: number[] = [];
    for (let i = 0; i < 5; i++) {
      const [guard] = await lock.acquire('fenced');
      fences.push(guard!.fence!);
      await lock.release(guard!);
    }
    expect(fences.every((f, i) => Number.isSafeInteger(f) && f > (fences[i - 1] ?? 0))).toBe(true);
    const key = fenceKey(lock.redisKey('fenced'));
    expect(await clientOf(lock).get(key)).toBe(String(fences[4]));
    const life = await clientOf(lock).pttl(key);
    expect(life > 60_000 && life <= 61_000).toBe(true);
  });

  it("'memory://' gives each service a keyspace of its own; 'memory://NAME' one for every service of the name", async () => {
    quiet();
    const [a, b] = [
      new RedisLockService({ redis: 'memory://' }),
      new RedisLockService({ redis: 'memory://' }),
    ];
    expect((await a.acquire('k'))[0]).toBeDefined();
    expect((await b.acquire('k'))[0]).toBeDefined();
    const url = freshUrl();
    const [c, d] = [new RedisLockService({ redis: url }), new RedisLockService({ redis: url })];
    expect((await c.acquire('k'))[0]).toBeDefined();
    expect(await d.acquire('k')).toEqual([undefined, undefined]);
  });

  it('a closed client answers every call with an error, never a hang or an escape', async () => {
    quiet();
    const lock = new RedisLockService({ redis: 'memory://' });
    const [guard] = await lock.acquire('k');
    await clientOf(lock).quit();
    const [none, error] = await lock.acquire('j');
    expect(none).toBeUndefined();
    expect(error?.message).toBe('Redis lock failed: Connection is closed.');
    expect((await lock.release(guard!))[1]?.code).toBe('redis_unlock_failed');
    await settle();
    expect(escaped).toEqual([]);
  });
});
