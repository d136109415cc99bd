import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fenceKey, keySlot, releaseChannel, resultKey } from '../../lib/redis/keys.js';
import { releaseLock } from '../../lib/redis/lock-commands.js';
import { SharedResultStore } from '../../lib/single-flight/shared-result.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { ReleaseWait } from '../../lib/single-flight/release-wait.js';
import { releaseSubscriberFor } from '../../lib/single-flight/release-subscriber.js';
import { LockWatchdog } from '../../lib/single-flight/watchdog.js';
import type { LockClient } from '../../lib/redis/client.js';
import type { DuplicableClient } from '../../lib/types/clients.js';
import { CLUSTER_FAMILIES } from '../support/client-families.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';

// Every script names all the keys it touches in KEYS (lock, counter, result, release channel), in
// one slot, so ioredis routes the EVALSHA by KEYS[1] to the right master and Redis accepts it.
// Many cache keys are used so that locks land on all three masters.
let cluster: RedisCluster;
let client: Cluster;
beforeAll(async () => {
  cluster = await startRedisCluster();
  client = cluster.client();
});
afterAll(() => cluster.stop());

const CACHE_KEYS = Array.from({ length: 30 }, (_, i) => `report:${i}`);

/** The port of the master that serves `key`'s slot, from CLUSTER SLOTS. */
async function ownerPort(key: string): Promise<number> {
  const ranges = await cluster.node(0).cluster('SLOTS');
  const slot = keySlot(key);
  return ranges.find(([from, to]) => slot >= from && slot <= to)![2]![1];
}

async function mastersOf(keys: readonly string[]): Promise<Set<number>> {
  return new Set(await Promise.all(keys.map(ownerPort)));
}

/** SSUBSCRIBErs of `channel`, asked of the master that owns its slot. */
async function shardSubscribers(channel: string): Promise<number> {
  const port = await ownerPort(channel);
  const node = cluster.node(cluster.nodes.findIndex((n) => n.port === port));
  const reply = (await node.call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
  return Number(reply[1]);
}

/** How many pub/sub connections each node of the cluster has now. */
async function pubsubConnections(): Promise<number[]> {
  return Promise.all(
    cluster.nodes.map(async (_, i) => {
      const list = String(await cluster.node(i).call('CLIENT', 'LIST', 'TYPE', 'pubsub'));
      return list.split('\n').filter((line) => line.startsWith('id=')).length;
    }),
  );
}

describe.each(CLUSTER_FAMILIES)('cluster, through $name', (family) => {
  const connect = (): Promise<LockClient> => family.connect(cluster);
  afterAll(() => family.closeAll());

  describe('acquire, extend and release with SPUBLISH (no CROSSSLOT)', () => {
    it('runs on every master', async () => {
      const lock = new RedisLockService({
        redis: await connect(),
        namespace: `cl:lock:${family.name}:`,
      });
      expect((await mastersOf(CACHE_KEYS.map((k) => lock.redisKey(k)))).size).toBe(3);
      for (const key of CACHE_KEYS) {
        const [guard, error] = await lock.acquire(key);
        expect(error).toBeUndefined();
        expect(await lock.acquire(key)).toEqual([undefined, undefined]);
        expect(await lock.extend(guard!, 30)).toEqual([true, undefined]);
        expect(await lock.release(guard!)).toEqual([true, undefined]);
      }
    });
  });

  describe('fencing', () => {
    it('numbers strictly increase across clients, on every master', async () => {
      const clients = [await connect(), await connect(), await connect()];
      const workers = clients.map(
        (redis) =>
          new RedisLockService({ redis, namespace: `cl:fence:${family.name}:`, fencing: true }),
      );
      for (const key of CACHE_KEYS.slice(0, 10)) {
        const fences: number[] = [];
        for (let round = 0; round < 6; round++) {
          const results = await Promise.all(workers.map((w) => w.acquire(key)));
          const winners = results.filter(([g, e]) => g !== undefined && e === undefined);
          expect(winners).toHaveLength(1);
          fences.push(winners[0]![0]!.fence!);
          await workers[0]!.release(winners[0]![0]!);
        }
        expect(fences.every((f, i) => Number.isSafeInteger(f) && f > (fences[i - 1] ?? 0))).toBe(
          true,
        );
        expect(await client.get(fenceKey(workers[0]!.redisKey(key)))).toBe(String(fences[5]));
      }
    });
  });

  describe('shared result', () => {
    it('the leader stores and a waiter reads, for locks on every master', async () => {
      const lock = new RedisLockService({
        redis: await connect(),
        namespace: `cl:share:${family.name}:`,
      });
      const results = new SharedResultStore({ lock, ttl: 30 });
      for (const key of CACHE_KEYS) {
        const [guard] = await lock.acquire(key);
        expect(await results.storeAndRelease(guard!, results.serialize({ key }, key))).toEqual([
          true,
          undefined,
        ]);
        await lock.release(guard!);
        expect(await results.read(lock.redisKey(key), key)).toEqual({
          status: 'hit',
          value: { key },
        });
        expect(await client.exists(resultKey(guard!.key))).toBe(1);
      }
    });
  });

  describe('wake on release through sharded pub/sub', () => {
    it('waiters on locks spread over all masters wake on release', async () => {
      const lock = new RedisLockService({
        redis: await connect(),
        namespace: `cl:wake:${family.name}:`,
        ttl: 60,
      });
      const lockClient = await lock.getClient();
      releaseSubscriberFor(lockClient as unknown as DuplicableClient, { idleMs: 0 });
      const strategy = new ReleaseWait(
        async () => lockClient,
        () => {},
      );
      const guards = await Promise.all(CACHE_KEYS.map(async (k) => (await lock.acquire(k))[0]!));
      const order: string[] = [];
      const waits = guards.map((g, i) =>
        strategy.waitForRelease(g.key, Date.now() + 60_000).then(() => order.push(`w${i}`)),
      );
      // Wait until every channel is subscribed on its shard before releasing.
      for (const g of guards) {
        while ((await shardSubscribers(releaseChannel(g.key))) !== 1) {
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      order.push('release');
      for (const g of guards) await lock.release(g);
      await Promise.all(waits);
      expect(order[0]).toBe('release');
      expect(order).toHaveLength(CACHE_KEYS.length + 1);
      // One subscriber for all the keys: at most one pub/sub connection on each master.
      for (const count of await pubsubConnections()) expect(count).toBeLessThanOrEqual(1);
      // Nothing waits any more: every shard subscription is gone.
      for (const g of guards) {
        while ((await shardSubscribers(releaseChannel(g.key))) !== 0) {
          await new Promise((r) => setTimeout(r, 20));
        }
      }
      while ((await pubsubConnections()).some((count) => count > 0)) {
        await new Promise((r) => setTimeout(r, 20));
      }
    });
  });

  describe('watchdog', () => {
    it('extends a lock on the cluster through the service', async () => {
      const lock = new RedisLockService({
        redis: await connect(),
        namespace: `cl:wd:${family.name}:`,
      });
      const [guard] = await lock.acquire('k', 0.3);
      const watchdog = new LockWatchdog({ lock, guard: guard!, ttl: 0.3, onLockLost: () => {} });
      watchdog.start();
      // Alive after three TTLs: extended at least three times.
      await new Promise((r) => setTimeout(r, 1000));
      watchdog.stop();
      expect(await client.get(guard!.key)).toBe(guard!.token);
      await lock.release(guard!);
    });
  });
});

describe('cluster: the check is real', () => {
  it('a script whose channel is not in the lock key’s slot is refused by the cluster', async () => {
    const lock = new RedisLockService({ redis: client, namespace: 'cl:neg:' });
    const key = lock.redisKey('x');
    const elsewhere = CACHE_KEYS.map((k) => `{${k}}:release`).find(
      (channel) => keySlot(channel) !== keySlot(key),
    )!;
    const script = "return redis.call('SPUBLISH', KEYS[2], 'x')";
    await expect(client.eval(script, 2, key, elsewhere)).rejects.toThrow(/CROSSSLOT|non local/);
    expect(await client.eval(script, 2, key, releaseChannel(key))).toBe(0);
  });

  it('a release that writes a key outside the lock key’s slot is refused and changes nothing', async () => {
    const lock = new RedisLockService({ redis: client, namespace: 'cl:negwrite:' });
    const [guard] = await lock.acquire('x');
    const elsewhere = CACHE_KEYS.map((k) => `{${k}}:result`).find(
      (k) => keySlot(k) !== keySlot(guard!.key),
    )!;
    const write = { key: elsewhere, payload: 'v', ttlMs: 5000 };
    await expect(releaseLock(client, guard!.key, guard!.token, write)).rejects.toThrow(
      /CROSSSLOT|non local/,
    );
    expect(await client.get(guard!.key)).toBe(guard!.token);
    expect(await client.exists(elsewhere)).toBe(0);
    const own = { key: resultKey(guard!.key), payload: 'v', ttlMs: 5000 };
    expect(await releaseLock(client, guard!.key, guard!.token, own)).toBe(1);
    expect(await client.get(resultKey(guard!.key))).toBe('v');
  });
});
