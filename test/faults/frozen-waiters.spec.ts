import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  RedisLockService,
  RedisUnavailableError,
  SingleFlightEngine,
  type SingleFlightOptions,
} from '../../lib/index.js';
import { releaseChannel } from '../../lib/redis/keys.js';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { RECHECK_MS } from '../../lib/single-flight/release-wait.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { shardSubscribers, silent } from '../single-flight/support.js';
import { figures, sleep } from './fault-helpers.js';

/**
 * Redis paused (SIGSTOP) while one worker builds a hot key and others wait for its lock: a
 * paused server keeps its connections and answers nothing. Every waiting call ends within
 * commandTimeout + RECHECK_MS (+ 100 ms for the event loop) of the pause, as `onRedisError` says:
 * it runs without the lock, or rejects with RedisUnavailableError. Not at the end of the pause,
 * nor at lockTimeout.
 */

const COMMAND_TIMEOUT = 400;
const PAUSE_MS = 3000;
/** How much later than commandTimeout + RECHECK_MS a waiting call may end. */
const SLACK_MS = 100;
const WAITERS = 4;

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(async () => {
  server.resume();
  await server.stop();
});

/** A worker: its own fail-fast client with COMMAND_TIMEOUT (connected), its own lock and engine. */
async function worker(ns: string, options: SingleFlightOptions = {}): Promise<SingleFlightEngine> {
  const client = server.client({ ...FAIL_FAST_CLIENT_DEFAULTS, commandTimeout: COMMAND_TIMEOUT });
  await new Promise((resolve) => client.once('ready', resolve));
  const lock = new RedisLockService({ redis: client, namespace: ns, ttl: 30 });
  return new SingleFlightEngine({ lock, options: { logger: silent, lockTimeout: 20, ...options } });
}

interface Ended {
  readonly afterPauseMs: number;
  readonly outcome: unknown;
}

/**
 * A holder builds `key` until the pause is over; WAITERS other workers call it and wait; Redis is
 * paused once each listens for the release. Resolves to how long after the pause each waiting
 * call ended, and with what.
 */
async function waitersAcrossPause(ns: string, options: SingleFlightOptions): Promise<Ended[]> {
  const key = 'hot';
  const holder = await worker(ns);
  const building = deferred();
  const holding = holder.run(key, () => building.promise);
  const lockKey = new RedisLockService({ redis: 'memory://', namespace: ns }).redisKey(key);
  await until(async () => (await admin.exists(lockKey)) === 1);
  const engines = await Promise.all(Array.from({ length: WAITERS }, () => worker(ns, options)));
  let pausedAt = 0;
  const calls = engines.map((engine, i) =>
    engine
      .run(key, () => `waiter ${i} ran`)
      .then(
        (value) => ({ afterPauseMs: Date.now() - pausedAt, outcome: value }),
        (error: unknown) => ({ afterPauseMs: Date.now() - pausedAt, outcome: error }),
      ),
  );
  await until(async () => (await shardSubscribers(admin, releaseChannel(lockKey))) === WAITERS);
  // Each has asked how long the lock has left, and sleeps on.
  await sleep(100);
  pausedAt = Date.now();
  server.pause();
  const ended = await Promise.race([Promise.all(calls), sleep(PAUSE_MS).then(() => undefined)]);
  server.resume();
  building.resolve();
  await holding.catch(() => undefined);
  const all = ended ?? (await Promise.all(calls));
  await Promise.all([holder, ...engines].map((engine) => engine.close()));
  return all;
}

describe(`Redis paused while workers wait for a holder's lock (commandTimeout ${COMMAND_TIMEOUT} ms)`, () => {
  const bound = COMMAND_TIMEOUT + RECHECK_MS + SLACK_MS;

  it(`onRedisError 'proceed': each waiting call runs without the lock within commandTimeout + ${RECHECK_MS} ms`, async () => {
    const ended = await waitersAcrossPause('test:frozen:proceed:', {});
    figures('waiters across SIGSTOP (proceed)', {
      maxEndMs: Math.max(...ended.map((e) => e.afterPauseMs)),
    });
    expect(ended.map((e) => e.outcome).toSorted()).toEqual(
      Array.from({ length: WAITERS }, (_, i) => `waiter ${i} ran`),
    );
    for (const { afterPauseMs } of ended) expect(afterPauseMs).toBeLessThanOrEqual(bound);
  });

  it(`onRedisError 'throw': each waiting call rejects with RedisUnavailableError within commandTimeout + ${RECHECK_MS} ms`, async () => {
    const ended = await waitersAcrossPause('test:frozen:throw:', { onRedisError: 'throw' });
    figures('waiters across SIGSTOP (throw)', {
      maxEndMs: Math.max(...ended.map((e) => e.afterPauseMs)),
    });
    for (const { afterPauseMs, outcome } of ended) {
      expect(outcome).toBeInstanceOf(RedisUnavailableError);
      expect(afterPauseMs).toBeLessThanOrEqual(bound);
    }
  });
});
