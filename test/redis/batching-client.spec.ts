import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { batchingClient } from '../../lib/redis/batching-client.js';
import { RedisLockService, type LockGuard } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { withRedisServer } from '../lock/lock-helpers.js';
import { collectEscapes, settle } from '../support/escapes.js';

/**
 * The lock's commands under load: one caller at a time sends each command at once; concurrent
 * callers share pipelines. Every reply, error and the order stay each command's own. Real Redis.
 */

let server: RedisServer;
let admin: Redis;
withRedisServer((s, a) => ((server = s), (admin = a)));

/** A plain ioredis client whose pipelines are counted (the test's own client, not the lock's). */
async function countedClient(options = {}): Promise<{ client: Redis; pipelines: number[] }> {
  const client = server.client(options);
  await client.ping();
  const pipelines: number[] = [];
  const pipeline = client.pipeline.bind(client);
  client.pipeline = ((commands: unknown[][]) => {
    pipelines.push(commands.length);
    return pipeline(commands);
  }) as Redis['pipeline'];
  return { client, pipelines };
}

describe('batching of the lock commands', () => {
  it('one caller at a time: every command is sent as it is, no pipeline', async () => {
    const { client, pipelines } = await countedClient();
    const lock = new RedisLockService({ redis: client, namespace: 'batch:one:' });
    for (let i = 0; i < 20; i++) {
      const [guard] = await lock.acquire(`k${i}`);
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    }
    expect(pipelines).toEqual([]);
  });

  it('64 concurrent callers: every lock taken and released, in far fewer writes than commands', async () => {
    const { client, pipelines } = await countedClient();
    const lock = new RedisLockService({ redis: client, namespace: 'batch:many:' });
    const guards = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const [guard, error] = await lock.acquire(`k${i}`);
        expect(error).toBeUndefined();
        expect(await admin.get(guard!.key)).toBe(guard!.token);
        expect(await lock.release(guard!)).toEqual([true, undefined]);
        return guard!;
      }),
    );
    expect(new Set(guards.map((g) => g.token)).size).toBe(64);
    for (const guard of guards) expect(await admin.exists(guard.key)).toBe(0);
    // 128 commands: the first acquire alone, the rest in a few pipelines.
    const pipelined = pipelines.reduce((n, size) => n + size, 0);
    expect(pipelined).toBeGreaterThanOrEqual(120);
    expect(pipelines.length).toBeLessThanOrEqual(8);
  });

  it('busy answers and holders stay right inside a pipeline: one of 50 callers gets a hot key', async () => {
    const { client, pipelines } = await countedClient();
    const lock = new RedisLockService({ redis: client, namespace: 'batch:hot:' });
    const results = await Promise.all(Array.from({ length: 50 }, () => lock.acquire('hot')));
    const holders = results.filter(([guard]) => guard);
    expect(holders).toHaveLength(1);
    expect(results.filter(([g, e]) => !g && !e)).toHaveLength(49); // busy, no error
    expect(pipelines.length).toBeGreaterThan(0);
    const [holder] = holders[0]!;
    expect(await admin.get(holder!.key)).toBe(holder!.token);
    await lock.release(holder!);
  });

  it('commands keep their order: concurrent release then acquire of one key both succeed', async () => {
    const { client } = await countedClient();
    const lock = new RedisLockService({ redis: client, namespace: 'batch:order:' });
    const [first] = await lock.acquire('k');
    const other = lock.acquire('other'); // in flight: what follows is queued
    const [released, again] = await Promise.all([lock.release(first!), lock.acquire('k')]);
    await other;
    expect(released).toEqual([true, undefined]);
    expect(again[0]).toBeDefined();
    expect(await admin.get(again[0]!.key)).toBe(again[0]!.token);
  });

  it('a NOSCRIPT inside a pipeline falls back to EVAL for that command only', async () => {
    const { client, pipelines } = await countedClient();
    const lock = new RedisLockService({ redis: client, namespace: 'batch:noscript:' });
    const guards: LockGuard[] = [];
    for (let i = 0; i < 10; i++) guards.push((await lock.acquire(`k${i}`))[0]!);
    await admin.script('FLUSH');
    const results = await Promise.all(guards.map((guard) => lock.release(guard)));
    expect(results.every(([ok, error]) => ok && error === undefined)).toBe(true);
    for (const guard of guards) expect(await admin.exists(guard.key)).toBe(0);
    expect(pipelines.length).toBeGreaterThan(0);
  });

  it('a paused Redis: concurrent calls fail with the client’s command timeout, none hangs', async () => {
    const paused = await startRedis();
    try {
      const client = paused.client({ commandTimeout: 300, maxRetriesPerRequest: 1 });
      await client.ping();
      const lock = new RedisLockService({ redis: client, namespace: 'batch:paused:' });
      paused.pause();
      const start = Date.now();
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) => lock.acquire(`k${i}`)),
      );
      const elapsed = Date.now() - start;
      expect(results.every(([guard, error]) => !guard && error?.code === 'redis_lock_failed')).toBe(
        true,
      );
      expect(results[0]![1]!.message).toBe('Redis lock failed: Command timed out');
      expect(elapsed).toBeLessThan(3000);
    } finally {
      paused.resume();
      await paused.stop();
    }
  });

  it('a client that auto-pipelines, a Cluster, or an eval-only client is used as it is', () => {
    const auto = server.client({ enableAutoPipelining: true });
    expect(batchingClient(auto)).toBe(auto);
    const evalOnly = { eval: () => Promise.resolve(1) };
    expect(batchingClient(evalOnly)).toBe(evalOnly);
    const clusterLike = Object.assign(Object.create(server.client()) as Redis, { isCluster: true });
    expect(batchingClient(clusterLike)).toBe(clusterLike);
    // A plain client is wrapped; the wrapper has exactly the lock's three commands.
    const plain = server.client();
    const wrapped = batchingClient(plain);
    expect(wrapped).not.toBe(plain);
    expect(Object.keys(wrapped).toSorted()).toEqual(['eval', 'evalsha', 'set']);
  });

  describe('a client whose pipeline answers something else than one [error, reply] per command', () => {
    const escaped = collectEscapes();
    const answers: [string, (() => unknown) | undefined][] = [
      ['exec() answers no promise', () => 42],
      ['exec() resolves to no array', () => Promise.resolve('nope')],
      ['exec() resolves to too few pairs', () => Promise.resolve([])],
      ['exec() resolves to pairs that are no pairs', () => Promise.resolve([1, 2, 3, 4])],
      ['exec() is missing', undefined],
    ];
    it.each(answers)(
      '%s: every queued acquire settles with the bad-reply error, nothing escapes',
      async (_answer, exec) => {
        const client = server.client();
        await client.ping();
        client.pipeline = (() => (exec ? { exec } : {})) as unknown as Redis['pipeline'];
        const lock = new RedisLockService({ redis: client, namespace: 'batch:bad:' });
        const results = await Promise.all(
          Array.from({ length: 5 }, (_, i) => lock.acquire(`bad-${i}`)),
        );
        // The first goes out alone, at once; the four behind it share the broken pipeline.
        expect(results[0]![1]).toBeUndefined();
        for (const [guard, error] of results.slice(1)) {
          expect(guard).toBeUndefined();
          expect(error?.code).toMatch(/^redis_(bad_reply|lock_failed)$/);
        }
        if (exec) {
          for (const [, error] of results.slice(1)) {
            expect(error).toMatchObject({
              code: 'redis_bad_reply',
              message: 'Redis lock failed: Redis lock command returned an unexpected reply',
            });
          }
        }
        await settle();
        expect(escaped).toEqual([]);
      },
    );
  });
});
