import type { INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferLockModule, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { lateAcquires } from '../support/command-stats.js';
import { FailoverStampede, failoverFigures, type Build } from '../support/failover-stampede.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { sleep } from '../single-flight/support.js';
import { startRedisSentinel, type RedisSentinelGroup } from '../support/redis-sentinel.js';

/**
 * A Redis Sentinel fail-over in the middle of a stampede: a real master, one replica and three
 * sentinels (quorum 2, down-after 1 s). Four application instances, each a BufferLockModule made
 * from ioredis Sentinel options (so with the fail-fast client settings), call one key with
 * `share: true`. The master is killed (SIGKILL) while a build holds the lock; the sentinels promote
 * the replica, and the same clients find the new master by themselves.
 */

const COMMAND_TIMEOUT = 300;
const BUILD_MS = 300;
const TTL = 3;
const LOCK_TIMEOUT = 2;
const INSTANCES = 4;
const CALLERS = 8;
const KEY = 'report';
/** Room for a loaded 2-core machine on top of the documented bound. */
const MARGIN_MS = 1000;

let group: RedisSentinelGroup;
const apps: INestApplicationContext[] = [];
const admins: Redis[] = [];
/** Stops the stampede's ticker, also when the test failed while it ran. */
let stopTicking = (): void => {};

beforeAll(async () => {
  group = await startRedisSentinel({ downAfterMs: 1000, failoverTimeoutMs: 3000 });
  for (let i = 0; i < INSTANCES; i++) {
    const ref = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRoot({
          redis: {
            sentinels: [...group.sentinels],
            name: group.name,
            commandTimeout: COMMAND_TIMEOUT,
          },
          namespace: 'failover:sentinel:',
          ttl: TTL,
          lockTimeout: LOCK_TIMEOUT,
          logger: new MemoryLogger(),
        }),
      ],
    }).compile();
    apps.push(await ref.init());
  }
}, 30_000);

afterAll(async () => {
  stopTicking();
  for (const client of admins) client.disconnect();
  await Promise.allSettled(apps.map((app) => app.close()));
  await group?.stop();
});

/** A plain client on one server, closed in afterAll. */
function admin(port: number): Redis {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => {});
  admins.push(client);
  return client;
}

describe('Redis Sentinel: the master killed mid-stampede, the replica promoted', () => {
  it('every call settles, calls fail open within commandTimeout while no master answers, and the lock works on the new master without a restart', async () => {
    const engines = apps.map((app) => app.get(SingleFlightEngine));
    const lock = apps[0]!.get(RedisLockService);
    const redisKey = lock.redisKey(KEY);
    const stampede = new FailoverStampede(engines, KEY, BUILD_MS);
    const late = await lateAcquires(group.replica.client(), redisKey);
    const oldMaster = group.master.port;
    expect(await group.masterPort()).toBe(oldMaster);

    // Healthy: one instance builds, every other caller gets its result.
    const healthy = await stampede.wave(CALLERS);
    expect(healthy.map((b) => b.locked)).toEqual([true]);

    // A new stampede; the master dies while its leader builds holding the lock.
    const wave = stampede.wave(CALLERS);
    await until(() => stampede.builds.length > healthy.length, 5000);
    stopTicking = stampede.tick(100);
    await group.master.kill();
    const killedAt = Date.now();

    const newMaster = await group.failedOverFrom(oldMaster, 20_000);
    const promotedAt = Date.now();
    expect(newMaster).toBe(group.replica.port);
    const promoted = admin(newMaster);
    // The lock of the killed master's last holder reached the replica; its release never will.
    const staleLockMs = await promoted.pttl(redisKey);

    // The lock is taken again on the new master, with the clients the instances had; each
    // instance's breaker closes once its client is ready on the new master.
    const relocked = (): Build | undefined =>
      stampede.builds.find((b) => b.locked && b.start > killedAt);
    await until(() => relocked() !== undefined, 20_000);
    const clients = (await Promise.all(
      apps.map((app) => app.get(RedisLockService).getClient()),
    )) as unknown as Redis[];
    const back = (): boolean =>
      engines.every((e, i) => e.breaker?.state === 'closed' && clients[i]!.status === 'ready');
    await until(back, 20_000).catch((error: unknown) => {
      const states = engines.map((e, i) => `${e.breaker?.state}/${clients[i]!.status}`);
      throw new Error(`instances not back (breaker/client): ${states.join(', ')}`, {
        cause: error,
      });
    });
    const backAt = Date.now();
    await sleep(500);
    const firstLock = relocked()!.start;
    stopTicking();
    await wave;
    await stampede.settled();

    // The lock lives on the new master now.
    const seen: number[] = [];
    stampede.onLockedBuild = async () => void seen.push(await promoted.exists(redisKey));
    const after = await stampede.wave(CALLERS);
    stampede.onLockedBuild = undefined;

    const figures = failoverFigures(stampede, {
      killedAt,
      promotedAt,
      firstLock,
      backAt,
      staleLockMs,
      lateAcquires: late(),
      after,
    });
    console.log('sentinel fail-over', figures);

    // Every call settled with a build's value: none rejected, none hung.
    expect(figures.unsettledCalls).toBe(0);
    // While no master answered: each call ran the work without the lock, at once.
    expect(figures.buildsWhileDown).toBeGreaterThan(0);
    expect(figures.lockedBuildsWhileDown).toBe(0);
    expect(figures.worstAdmissionWhileDownMs).toBeLessThan(COMMAND_TIMEOUT + MARGIN_MS);
    // A call that joined a flight begun before the kill waits with it, yet never longer than a
    // waiter may (lockTimeout), plus its own round trips and build.
    expect(figures.worstCallMs).toBeLessThan(
      LOCK_TIMEOUT * 1000 + 2 * COMMAND_TIMEOUT + BUILD_MS + MARGIN_MS,
    );
    // No acquire the lock gave up on reached the new master after its own release.
    expect(figures.lateAcquires).toBe(0);
    // Once every instance's client was ready on the new master, nobody built without the lock,
    // and a stampede costs one build again, held on the new master.
    expect(figures.unlockedBuildsAfterBack).toBe(0);
    expect(seen).toEqual([1]);
    expect(after.length).toBeLessThanOrEqual(2);
    expect(after[0]!.locked).toBe(true);
  }, 40_000);
});
