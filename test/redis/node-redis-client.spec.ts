import type { Redis } from 'ioredis';
import { Test } from '@nestjs/testing';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockModule,
  RedisLockService,
  SingleFlightEngine,
} from '../../lib/index.js';
import { createClient } from 'redis';
import { createClient as createClient5 } from 'redis5';
import { releaseChannel } from '../../lib/redis/keys.js';
import type { LockClient, RedisScriptClient } from '../../lib/index.js';

type NodeRedisConnection = Exclude<LockClient, RedisScriptClient>;
import { BreakerRecovery } from '../../lib/single-flight/breaker-recovery.js';
import { releaseSubscriberFor } from '../../lib/single-flight/release-subscriber.js';
import type { DuplicableClient } from '../../lib/types/clients.js';
import {
  CLUSTER_FAMILIES,
  IOVALKEY,
  NODE_REDIS,
  NODE_REDIS_5,
  type ClientFamily,
} from '../support/client-families.js';
import { commandStats } from '../support/command-stats.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { until } from '../support/nest-helpers.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { withRedisServer } from '../lock/lock-helpers.js';

/**
 * A node-redis client or cluster (`createClient()`, `createCluster()` of the `redis` package, v5
 * and v6) is taken as it is and driven in its own terms: scripts with `{ keys, arguments }` as
 * strings, sharded pub/sub on a duplicate for the wake-up, PING and `'ready'` for the breaker, its
 * errors as the lock's error results. Real Redis behind every client.
 */

const NS = 'node-redis:';
let server: RedisServer;
let admin: Redis;
withRedisServer((s, a) => ((server = s), (admin = a)));

/** Pub/sub connections the server sees now. */
const pubsub = async (): Promise<number> =>
  String(await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub'))
    .split('\n')
    .filter((line) => line.startsWith('id=')).length;

const escaped = collectEscapes();

/** A node-redis client as the family makes it, typed as the lock takes it. */
type NodeClient = NodeRedisConnection & { destroy(): void };

/** An engine of its own (as in another process) on `client`, sharing results. */
const sharingEngine = (client: NodeClient, namespace: string): SingleFlightEngine =>
  new SingleFlightEngine({
    lock: new RedisLockService({ redis: client, namespace }),
    options: { lockTimeout: 5, share: true },
  });

describe.each([NODE_REDIS, NODE_REDIS_5])('a $name client', (family: ClientFamily) => {
  afterAll(() => family.closeAll());
  // Each family its own keys: a lock left held by one family's test is not another's.
  const ns = `${NS}${family.name}:`;
  const connect = async (): Promise<NodeClient> =>
    (await family.connect(server)) as unknown as NodeClient;

  it('acquires with SET NX PX, extends and releases, sending every number as a string', async () => {
    const lock = new RedisLockService({ redis: await connect(), namespace: ns, ttl: 0.25 });
    await admin.config('RESETSTAT');
    const [guard, error] = await lock.acquire('strings');
    expect(error).toBeUndefined();
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    expect(await admin.pttl(guard!.key)).toBeLessThanOrEqual(250);
    expect(await lock.extend(guard!, 30)).toEqual([true, undefined]);
    expect(await admin.pttl(guard!.key)).toBeGreaterThan(25_000);
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    expect(await admin.exists(guard!.key)).toBe(0);
    const stats = await commandStats(admin);
    expect(stats.get('set')).toBe(1);
    expect([...stats.keys()].filter((name) => name.startsWith('eval')).length).toBeGreaterThan(0);
  });

  it('returned by a factory, it is used as the client; fencing numbers grow per key', async () => {
    const client = await connect();
    const lock = new RedisLockService({ redis: () => client, namespace: ns, fencing: true });
    const [first] = await lock.acquire('fenced');
    await lock.release(first!);
    const [second] = await lock.acquire('fenced');
    expect(second!.fence).toBeGreaterThan(first!.fence!);
    await lock.release(second!);
  });

  it('after SCRIPT FLUSH the scripts run again by EVAL (NOSCRIPT is answered)', async () => {
    const lock = new RedisLockService({ redis: await connect(), namespace: ns });
    const [guard] = await lock.acquire('noscript');
    await lock.release(guard!);
    const [again] = await lock.acquire('noscript');
    await admin.script('FLUSH');
    expect(await lock.release(again!)).toEqual([true, undefined]);
    expect(await admin.exists(again!.key)).toBe(0);
  });

  it('a release wakes a listener through SSUBSCRIBE on one duplicate connection', async () => {
    const lock = new RedisLockService({ redis: await connect(), namespace: ns });
    const client = (await lock.getClient()) as unknown as DuplicableClient;
    const subscriber = releaseSubscriberFor(client, { idleMs: 0 });
    const before = await pubsub();
    const [guard] = await lock.acquire('wake');
    let woken = 0;
    const listening = subscriber.listen(releaseChannel(guard!.key), () => woken++);
    expect(await listening.ready).toBe(true);
    expect(await pubsub()).toBe(before + 1);
    await lock.release(guard!);
    await until(() => woken === 1);
    listening.close();
    subscriber.close();
    await settle();
    expect(woken).toBe(1);
    expect(escaped).toEqual([]);
  });

  it('share: true — of two processes, one runs the work and the other takes its result', async () => {
    const [a, b] = [await connect(), await connect()];
    let runs = 0;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const work = async (): Promise<{ total: number }> => {
      runs++;
      await gate;
      return { total: 42 };
    };
    const leader = sharingEngine(a, ns).run('shared', work);
    await until(async () => runs === 1);
    const follower = sharingEngine(b, ns).run('shared', work);
    await settle();
    open();
    expect(await Promise.all([leader, follower])).toEqual([{ total: 42 }, { total: 42 }]);
    expect(runs).toBe(1);
  });

  it('BufferCache on the built-in Redis store: one build, then hits from the store', async () => {
    const cache = new BufferCache({
      lock: new RedisLockService({ redis: await connect(), namespace: ns }),
    });
    let builds = 0;
    const build = async (): Promise<string> => `built ${++builds}`;
    const results = await Promise.all([1, 2, 3].map(() => cache.getOrSet('cached', build)));
    expect(results).toEqual(['built 1', 'built 1', 'built 1']);
    expect(await cache.get('cached')).toBe('built 1');
    expect(builds).toBe(1);
  });

  it('a closed client gives error results (redis_lock_failed with its error), nothing escapes', async () => {
    const client = await connect();
    const lock = new RedisLockService({ redis: client, namespace: ns });
    const [guard] = await lock.acquire('closed');
    client.destroy();
    const [none, error] = await lock.acquire('closed-2');
    expect(none).toBeUndefined();
    expect(error?.code).toBe('redis_lock_failed');
    expect(error?.cause).toBeInstanceOf(Error);
    expect(error?.message).toBe(`Redis lock failed: ${(error!.cause as Error).message}`);
    expect((await lock.release(guard!))[1]?.code).toBe('redis_unlock_failed');
    expect((await lock.extend(guard!))[1]?.code).toBe('redis_extend_failed');
    await settle();
    expect(escaped).toEqual([]);
  });

  it('the breaker’s watch sees Redis back: a PING answered after a pause', async () => {
    const own = await startRedis();
    try {
      const client = await family.connect(own);
      const lock = new RedisLockService({ redis: client as NodeClient, namespace: ns });
      let back = 0;
      const recovery = new BreakerRecovery({
        client: () => lock.getClient(),
        onBack: () => back++,
      });
      own.pause();
      recovery.start();
      await new Promise((r) => setTimeout(r, 200));
      expect(back).toBe(0);
      own.resume();
      await until(() => back > 0);
      recovery.close();
    } finally {
      await family.closeAll();
      await own.stop();
    }
  });

  it('the breaker’s watch sees Redis back: the client is ready again after a restart', async () => {
    const own = await startRedis();
    try {
      const client = await family.connect(own);
      const lock = new RedisLockService({ redis: client as NodeClient, namespace: ns });
      let back = 0;
      // No PING: only the 'ready' event of the reconnected client can say so.
      const recovery = new BreakerRecovery({
        client: () => lock.getClient(),
        onBack: () => back++,
      });
      recovery.start(false);
      await own.restart();
      await until(() => back > 0);
      recovery.close();
    } finally {
      await family.closeAll();
      await own.stop();
    }
  });

  it('BufferLockModule takes it from a factory and closes it at shutdown', async () => {
    let made: NodeClient | undefined;
    const moduleRef = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRoot({
          redis: async () => (made = await connect()),
          namespace: ns,
        }),
      ],
    }).compile();
    const app = moduleRef.createNestApplication();
    await app.init();
    const lock = app.get(RedisLockService);
    const [guard] = await lock.acquire('module');
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    await lock.release(guard!);
    expect(made!.isOpen).toBe(true);
    await app.close();
    expect(made!.isOpen).toBe(false);
    await settle();
    expect(escaped).toEqual([]);
  });
});

/**
 * node-redis's fail-fast settings of the README, with a shorter socket timeout: node-redis's
 * `commandOptions.timeout` bounds only the wait until a command is written, so a paused server is
 * noticed by the socket's silence (`socketTimeout`; PINGs keep an idle socket busy), and the
 * reconnect strategy brings the client back afterwards.
 */
const SOCKET_TIMEOUT_MS = 500;
const FAIL_FAST = {
  disableOfflineQueue: true,
  pingInterval: 100,
  socket: {
    socketTimeout: SOCKET_TIMEOUT_MS,
    connectTimeout: 2000,
    reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 1000),
  },
};

describe.each<
  [
    string,
    (
      url: string,
    ) => NodeClient & { on(e: 'error', l: () => void): unknown; connect(): Promise<unknown> },
  ]
>([
  ['node-redis 6', (url) => createClient({ url, ...FAIL_FAST })],
  ['node-redis 5', (url) => createClient5({ url, ...FAIL_FAST })],
])('a %s client with the fail-fast settings', (_, create) => {
  it('a paused server: acquire and release fail with their error within the socket timeout, and the lock works again once it is back', async () => {
    const own = await startRedis();
    const client = create(own.url);
    client.on('error', () => {});
    await client.connect();
    try {
      const lock = new RedisLockService({ redis: client, namespace: NS });
      const [guard] = await lock.acquire('paused');
      own.pause();
      const started = performance.now();
      const [[none, error], [released, releaseError]] = await Promise.all([
        lock.acquire('paused-2'),
        lock.release(guard!),
      ]);
      const elapsed = performance.now() - started;
      own.resume();
      expect(none).toBeUndefined();
      expect(error?.code).toBe('redis_lock_failed');
      expect(error!.message).toBe(`Redis lock failed: ${(error!.cause as Error).message}`);
      expect([released, releaseError?.code]).toEqual([false, 'redis_unlock_failed']);
      // The documented bound: the socket timeout, and a margin for a loaded machine.
      expect(elapsed).toBeLessThan(SOCKET_TIMEOUT_MS + 700);
      await until(async () => (await lock.acquire('back again'))[0] !== undefined);
      await settle();
      expect(escaped).toEqual([]);
    } finally {
      own.resume();
      client.destroy();
      await own.stop();
    }
  });
});

describe('an iovalkey client', () => {
  afterAll(() => IOVALKEY.closeAll());

  it('is driven like ioredis: concurrent acquires share one pipeline', async () => {
    const lock = new RedisLockService({ redis: await IOVALKEY.connect(server), namespace: NS });
    await lock.acquire('valkey-warm');
    await admin.config('RESETSTAT');
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) => lock.acquire(`valkey-${i}`)),
    );
    expect(results.filter(([guard]) => guard !== undefined)).toHaveLength(10);
    for (const [guard] of results) expect(await admin.get(guard!.key)).toBe(guard!.token);
    expect((await commandStats(admin)).get('set')).toBe(10);
  });
});

describe.each(CLUSTER_FAMILIES.filter((f) => f.name.startsWith('node-redis')))(
  'a $name',
  (family) => {
    let cluster: RedisCluster;
    afterAll(async () => {
      await family.closeAll();
      await cluster?.stop();
    });

    it('acquires and releases keys of every shard, and a release wakes a listener', async () => {
      cluster = await startRedisCluster();
      const lock = new RedisLockService({ redis: await family.connect(cluster), namespace: NS });
      const guards = [];
      for (let i = 0; i < 12; i++) {
        const [guard, error] = await lock.acquire(`cluster-${i}`);
        expect(error).toBeUndefined();
        guards.push(guard!);
      }
      const client = (await lock.getClient()) as unknown as DuplicableClient;
      const subscriber = releaseSubscriberFor(client, { idleMs: 0 });
      const woken: string[] = [];
      const listenings = guards.map((guard) =>
        subscriber.listen(releaseChannel(guard.key), () => woken.push(guard.key)),
      );
      expect(await Promise.all(listenings.map((l) => l.ready))).toEqual(guards.map(() => true));
      for (const guard of guards) expect(await lock.release(guard)).toEqual([true, undefined]);
      await until(() => woken.length === guards.length);
      expect(woken.toSorted()).toEqual(guards.map((g) => g.key).toSorted());
      for (const listening of listenings) listening.close();
      subscriber.close();
      await settle();
      expect(escaped).toEqual([]);
    });
  },
);
