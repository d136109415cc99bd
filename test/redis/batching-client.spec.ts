import type { Redis } from 'ioredis';
import { Writable } from 'node:stream';
import { describe, expect, it, onTestFinished } from 'vitest';
import { batchingClient } from '../../lib/redis/batching-client.js';
import { RedisLockService, type LockGuard } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { withRedisServer } from '../lock/lock-helpers.js';
import { collectEscapes, settle } from '../support/escapes.js';

/**
 * The lock's commands under load: one caller at a time sends each command at once; the commands
 * of concurrent callers leave their client's socket together, a batch leaving as soon as it holds
 * as many commands as are still waiting for Redis, and what is left at the end of the turn. Every
 * reply, error and the order stay each command's own. Real Redis.
 */

let server: RedisServer;
let admin: Redis;
withRedisServer((s, a) => ((server = s), (admin = a)));

interface Writes {
  /** Writes to the socket (one per command sent alone; a corked batch leaves in one). */
  writes: number;
  /** Times the socket was corked. */
  corks: number;
}

/** A plain ioredis client whose socket writes and corks are counted (the test's own client). */
async function countedClient(options = {}): Promise<{ client: Redis } & Writes> {
  const client = server.client(options);
  await client.ping();
  const counted = { client, writes: 0, corks: 0 };
  // A socket's writes reach the OS through its `_write` and `_writev`: those are counted.
  type Write = (...args: unknown[]) => unknown;
  const stream = client.stream as unknown as Record<'_write' | '_writev', Write | undefined>;
  for (const name of ['_write', '_writev'] as const) {
    const own = stream[name]?.bind(stream);
    if (own) stream[name] = (...args) => (counted.writes++, own(...args));
  }
  const cork = Writable.prototype.cork;
  Writable.prototype.cork = function (this: Writable) {
    if (this === client.stream) counted.corks++;
    return cork.call(this);
  };
  onTestFinished(() => void (Writable.prototype.cork = cork));
  return counted;
}

describe('batching of the lock commands', () => {
  it('one caller at a time: every command is sent as it is, never corked', async () => {
    const counted = await countedClient();
    const { client } = counted;
    const lock = new RedisLockService({ redis: client, namespace: 'batch:one:' });
    // The scripts loaded first: a NOSCRIPT answer would add an EVAL.
    await lock.release((await lock.acquire('warm'))[0]!);
    counted.writes = 0;
    for (let i = 0; i < 20; i++) {
      const [guard] = await lock.acquire(`k${i}`);
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    }
    expect(counted.corks).toBe(0);
    expect(counted.writes).toBe(40);
  });

  it('64 concurrent callers: every lock taken and released, in far fewer writes than commands', async () => {
    const counted = await countedClient();
    const { client } = counted;
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
    // 128 commands: the acquires in writes that double in size (see below), the releases a few
    // per chunk of replies; sent one by one they would take 128.
    expect(counted.corks).toBeGreaterThan(0);
    expect(counted.writes).toBeLessThanOrEqual(32);
  });

  it('a burst leaves in writes that double: 1, 1, 2, 4 … commands, so Redis starts on the first at once', async () => {
    const counted = await countedClient();
    const { client } = counted;
    const lock = new RedisLockService({ redis: client, namespace: 'batch:burst:' });
    await lock.release((await lock.acquire('warm'))[0]!);
    counted.writes = 0;
    const acquires = Array.from({ length: 64 }, (_, i) => lock.acquire(`k${i}`));
    // Before any reply: 1 + 1 + 2 + 4 + 8 + 16 + 32 commands.
    expect(counted.writes).toBe(7);
    const guards = (await Promise.all(acquires)).map(([guard]) => guard!);
    expect(counted.writes).toBe(7);
    for (const guard of guards) expect(await admin.get(guard.key)).toBe(guard.token);
    await Promise.all(guards.map((guard) => lock.release(guard)));
  });

  it('busy answers and holders stay right inside a batch: one of 50 callers gets a hot key', async () => {
    const counted = await countedClient();
    const { client } = counted;
    const lock = new RedisLockService({ redis: client, namespace: 'batch:hot:' });
    const results = await Promise.all(Array.from({ length: 50 }, () => lock.acquire('hot')));
    const holders = results.filter(([guard]) => guard);
    expect(holders).toHaveLength(1);
    expect(results.filter(([g, e]) => !g && !e)).toHaveLength(49); // busy, no error
    expect(counted.corks).toBeGreaterThan(0);
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

  it('a NOSCRIPT inside a batch falls back to EVAL for that command only', async () => {
    const counted = await countedClient();
    const { client } = counted;
    const lock = new RedisLockService({ redis: client, namespace: 'batch:noscript:' });
    const guards: LockGuard[] = [];
    for (let i = 0; i < 10; i++) guards.push((await lock.acquire(`k${i}`))[0]!);
    await admin.script('FLUSH');
    const results = await Promise.all(guards.map((guard) => lock.release(guard)));
    expect(results.every(([ok, error]) => ok && error === undefined)).toBe(true);
    for (const guard of guards) expect(await admin.exists(guard.key)).toBe(0);
    expect(counted.corks).toBeGreaterThan(0);
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

  describe('a socket whose own cork() and uncork() throw', () => {
    const escaped = collectEscapes();
    it('the lock still corks it the way Node does, and every lock is taken', async () => {
      const client = server.client();
      await client.ping();
      const stream = client.stream as unknown as Record<string, unknown>;
      stream['cork'] = () => {
        throw new Error('no cork');
      };
      stream['uncork'] = () => {
        throw new Error('no uncork');
      };
      const lock = new RedisLockService({ redis: client, namespace: 'batch:cork:' });
      const results = await Promise.all(
        Array.from({ length: 5 }, (_, i) => lock.acquire(`cork-${i}`)),
      );
      expect(results.map(([guard, error]) => [guard !== undefined, error])).toEqual(
        Array.from({ length: 5 }, () => [true, undefined]),
      );
      await settle();
      expect(escaped).toEqual([]);
      client.disconnect();
    });
  });
});
