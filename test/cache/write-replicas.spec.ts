import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  LockError,
  RedisLockService,
  type BufferLockOptions,
  type LockClient,
} from '../../lib/index.js';
import {
  CLUSTER_FAMILIES,
  EVAL_ONLY,
  IOREDIS,
  IOVALKEY,
  MEMORY,
  NODE_REDIS,
  NODE_REDIS_5,
} from '../support/client-families.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { startRedisSentinel, type RedisSentinelGroup } from '../support/redis-sentinel.js';
import { startTcpProxy } from '../support/tcp-proxy.js';

/**
 * With `writeReplicas`, a `set`, `delete` or `deleteByTag` returns once that many replicas have it
 * (Redis WAIT), so that a fail-over to a replica keeps it; one they do not confirm in time
 * rejects. The wait holds a connection of its own: the lock's commands and the cache's hits do
 * not wait with it.
 */

type WriteReplicas = BufferLockOptions['writeReplicas'];

let n = 0;
const key = (): string => `row:${++n}`;

function cacheOn(redis: LockClient, writeReplicas: WriteReplicas): BufferCache {
  const lock = new RedisLockService({ redis, namespace: 'test:replicas:' });
  return new BufferCache({ lock, options: { writeReplicas, logger: new MemoryLogger() } });
}

const settledWithin = async (write: Promise<unknown>, ms: number): Promise<boolean> => {
  let settled = false;
  void write.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((resolve) => setTimeout(resolve, ms));
  return settled;
};

const rejection = (write: Promise<unknown>): Promise<unknown> =>
  write.then(
    () => undefined,
    (error: unknown) => error,
  );

/**
 * Pauses `replica` while `write` starts: it has not returned 300 ms later; resumed, it returns,
 * and what the master has then, the replica has.
 */
async function waitsForReplica(
  replica: RedisServer,
  write: () => Promise<unknown>,
  keysOf: (server: 'master' | 'replica') => Promise<string[]>,
): Promise<void> {
  replica.pause();
  let writing: Promise<unknown>;
  try {
    writing = write();
    expect(await settledWithin(writing, 300)).toBe(false);
  } finally {
    replica.resume();
  }
  await writing;
  expect((await keysOf('replica')).toSorted()).toEqual((await keysOf('master')).toSorted());
}

describe('on a master with one replica', () => {
  let master: RedisServer;
  let replica: RedisServer;
  let plain: { master: Redis; replica: Redis };
  beforeAll(async () => {
    master = await startRedis();
    replica = await startRedis(['--replicaof', '127.0.0.1', String(master.port)]);
    plain = { master: master.client(), replica: replica.client() };
    await until(async () => /master_link_status:up/.test(await plain.replica.info('replication')));
  });
  afterAll(async () => {
    await replica.stop();
    await master.stop();
  });
  const keysOf = (server: 'master' | 'replica'): Promise<string[]> => plain[server].keys('*');

  const connected = async (): Promise<number> =>
    Number(/connected_clients:(\d+)/.exec(await plain.master.info('clients'))?.[1]);

  it("the writer's connection closes with the app, not after it", async () => {
    const before = await connected();
    const moduleRef = await Test.createTestingModule({
      imports: [BufferLockModule.forRoot({ redis: master.url, writeReplicas: { replicas: 1 } })],
    }).compile();
    const app = moduleRef.createNestApplication();
    await app.init();
    await app.get(BufferCache).set(key(), 1);
    // The module's client and the writer's.
    expect(await connected()).toBeGreaterThanOrEqual(before + 2);
    const closing = performance.now();
    await app.close();
    await until(async () => (await connected()) === before, 2000);
    expect(performance.now() - closing).toBeLessThan(2000);
  });

  describe.each([IOREDIS, NODE_REDIS, NODE_REDIS_5, IOVALKEY])('with $name', (family) => {
    afterAll(() => family.closeAll());

    it('set, delete and deleteByTag return only once the replica has them', async () => {
      const cache = cacheOn(await family.connect(master), { replicas: 1, timeout: 5 });
      const k = key();
      await waitsForReplica(replica, () => cache.set(k, 1, { tags: ['rows'] }), keysOf);
      await waitsForReplica(replica, () => cache.delete(k), keysOf);
      await waitsForReplica(replica, () => cache.deleteByTag('rows'), keysOf);
      expect(await cache.get(k)).toBeUndefined();
    });

    it('a replica that does not answer: the write rejects after timeout, hits answer meanwhile', async () => {
      const cache = cacheOn(await family.connect(master), { replicas: 1, timeout: 0.5 });
      const hot = key();
      await cache.set(hot, 'hot');
      replica.pause();
      try {
        const started = performance.now();
        const deleting = rejection(cache.delete(key()));
        const bumping = rejection(cache.deleteByTag('rows'));
        const hitStarted = performance.now();
        expect(await cache.get(hot)).toBe('hot');
        const hitMs = performance.now() - hitStarted;
        const [deleteError, bumpError] = await Promise.all([deleting, bumping]);
        expect(performance.now() - started).toBeGreaterThanOrEqual(450);
        expect(hitMs).toBeLessThan(250);
        expect(deleteError).toBeInstanceOf(LockError);
        expect(deleteError).toMatchObject({ code: 'cache_write_failed' });
        expect((deleteError as Error).message).toBe(
          'The cache store could not write or delete an entry: only 0 of 1 replicas had it after 0.5 s; the entry it held may still be served',
        );
        expect(bumpError).toMatchObject({ code: 'cache_delete_by_tag_failed' });
        expect((bumpError as Error).message).toContain('only 0 of 1 replicas had it after 0.5 s');
      } finally {
        replica.resume();
      }
    });

    it('more replicas than there are: every write rejects, saying how many had it', async () => {
      const cache = cacheOn(await family.connect(master), { replicas: 2, timeout: 0.2 });
      const error = await rejection(cache.set(key(), 1));
      expect((error as Error).message).toContain('only 1 of 2 replicas had it after 0.2 s');
    });
  });
});

/**
 * A master whose replica follows it through a proxy; `delete(k)` runs while the proxy holds the
 * stream back, the master dies, and the replica, cut off, is promoted: what does it hold for k?
 */
async function failOverDuring(writeReplicas: WriteReplicas): Promise<unknown> {
  const master = await startRedis();
  const link = await startTcpProxy(master.port);
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(link.port)]);
  try {
    const plain = replica.client();
    await until(async () => /master_link_status:up/.test(await plain.info('replication')));
    const lock = new RedisLockService({ redis: master.client(), namespace: 'test:failover:' });
    const cache = new BufferCache({
      lock,
      options: { writeReplicas, logger: new MemoryLogger() },
    });
    await cache.set('row', 'old');
    await until(async () => (await plain.dbsize()) === (await master.client().dbsize()));
    link.setMode({ kind: 'blackhole' });
    const deleting = cache.delete('row');
    // Returned before the replica could have it, or waiting for it.
    if (!(await settledWithin(deleting, 300))) link.setMode({ kind: 'pass' });
    await deleting;
    await master.kill();
    link.setMode({ kind: 'cut' });
    await plain.replicaof('NO', 'ONE');
    const promoted = new RedisLockService({ redis: plain, namespace: 'test:failover:' });
    return await new BufferCache({ lock: promoted }).get('row');
  } finally {
    await replica.stop();
    await link.close();
    await master.stop();
  }
}

describe('a fail-over to the replica', () => {
  it('without writeReplicas, a delete the replica had not received is lost: the old value is back', async () => {
    expect(await failOverDuring(false)).toBe('old');
  });

  it('with writeReplicas, the delete returns only once the replica has it, and survives', async () => {
    expect(await failOverDuring({ replicas: 1, timeout: 5 })).toBeUndefined();
  });
});

describe.each([EVAL_ONLY, MEMORY])(
  'with a client that cannot wait for replicas ($name)',
  (family) => {
    let server: RedisServer;
    beforeAll(async () => {
      server = await startRedis();
    });
    afterAll(async () => {
      await family.closeAll();
      await server.stop();
    });

    it('a write rejects, saying so; reads still answer', async () => {
      const cache = cacheOn(await family.connect(server), { replicas: 1, timeout: 0.5 });
      const k = key();
      const error = await rejection(cache.set(k, 1));
      expect(error).toMatchObject({ code: 'cache_write_failed' });
      expect((error as Error).message).toContain('the Redis client cannot wait for replicas');
      expect(await cache.getOrSet(key(), () => 2)).toBe(2);
    });
  },
);

describe('on a Redis Cluster with a replica per master', () => {
  let cluster: RedisCluster;
  beforeAll(async () => {
    cluster = await startRedisCluster({ replicas: 1 });
  });
  afterAll(() => cluster.stop());

  /** The replica of the master that serves `redisKey`'s slot. */
  async function replicaFor(redisKey: string): Promise<RedisServer> {
    const slot = Number(await cluster.node(0).cluster('KEYSLOT', redisKey));
    const ranges = await cluster.node(0).cluster('SLOTS');
    const [, , [, port]] = ranges.find(([from, to]) => from <= slot && slot <= to)!;
    const master = cluster.nodes.findIndex((node) => node.port === port);
    return cluster.nodes[await cluster.replicaOf(master)]!;
  }
  // The keys of every master, and of every replica: the same once a write has reached both.
  const keysOf = async (role: 'master' | 'replica'): Promise<string[]> => {
    const nodes = role === 'master' ? [0, 1, 2] : [3, 4, 5];
    const keys = await Promise.all(nodes.map((i) => cluster.node(i).keys('*')));
    return keys.flat();
  };

  describe.each(CLUSTER_FAMILIES)('with $name', (family) => {
    afterAll(() => family.closeAll());

    it("a write waits for the replica of its key's master, and for no other", async () => {
      const redis = await family.connect(cluster);
      const lock = new RedisLockService({ redis, namespace: 'test:replicas:' });
      const options = { writeReplicas: { replicas: 1, timeout: 5 }, logger: new MemoryLogger() };
      const cache = new BufferCache({ lock, options });
      const k = key();
      await waitsForReplica(await replicaFor(lock.redisKey(k)), () => cache.set(k, 1), keysOf);
      const tagReplica = await replicaFor('{nestjs-buffer-lock}');
      await waitsForReplica(tagReplica, () => cache.deleteByTag('rows'), keysOf);
      // A replica of another master paused: the write does not wait for it.
      const other = key();
      const otherReplica = await replicaFor(lock.redisKey(other));
      const elsewhere = cluster.nodes.slice(3).find((node) => node !== otherReplica)!;
      elsewhere.pause();
      try {
        expect(await settledWithin(cache.set(other, 2), 300)).toBe(true);
      } finally {
        elsewhere.resume();
      }
    });
  });
});

describe('through Redis Sentinel', () => {
  let group: RedisSentinelGroup;
  let client: Redis | undefined;
  beforeAll(async () => {
    group = await startRedisSentinel();
  });
  afterAll(async () => {
    client?.disconnect();
    await group.stop();
  });

  it("an ioredis Sentinel client's writes wait for the master's replica", async () => {
    client = new Redis({ sentinels: [...group.sentinels], name: group.name });
    client.on('error', () => {});
    const cache = cacheOn(client, { replicas: 1, timeout: 5 });
    const plain = { master: group.master.client(), replica: group.replica.client() };
    const keysOf = (server: 'master' | 'replica'): Promise<string[]> => plain[server].keys('*');
    const k = key();
    await waitsForReplica(group.replica, () => cache.set(k, 1, { tags: ['rows'] }), keysOf);
    await waitsForReplica(group.replica, () => cache.delete(k), keysOf);
  });
});

describe('writeReplicas options', () => {
  it.each([
    [{ replicas: 0 }, 'write_replicas_count_invalid'],
    [{ replicas: 1.5 }, 'write_replicas_count_invalid'],
    [{ timeout: 0 }, 'write_replicas_timeout_invalid'],
    [{ timeout: 'soon' }, 'write_replicas_timeout_invalid'],
    [{ wait: 1 }, 'option_unknown'],
    [true, 'write_replicas_invalid'],
    [1, 'write_replicas_invalid'],
  ])('writeReplicas: %j is refused with %s', (writeReplicas, code) => {
    let error: unknown;
    try {
      cacheOn({ eval: () => null }, writeReplicas as WriteReplicas);
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).violations.map((v) => v.code)).toContain(code);
  });

  it('takes seconds as a numeric string, as every option in seconds does', () => {
    expect(() => cacheOn({ eval: () => null }, { replicas: 1, timeout: '0.5' })).not.toThrow();
  });
});
