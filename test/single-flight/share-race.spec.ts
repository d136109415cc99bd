import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, SingleFlightEngine, type RedisScriptClient } from '../../lib/index.js';
import { resultKey } from '../../lib/redis/keys.js';
import { deferred } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { silent } from './support.js';

/**
 * `share: true` with a waiter that polls (its client has `eval()` only, so no wake-up): the
 * waiter can read the shared result an instant before the leader's release writes it, and then
 * win the lock that the same release freed. The order is forced here: the waiter's first read of
 * the result is held, its miss already answered, until the leader's call is over.
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(async () => {
  await server.stop();
});

/** An `eval()`-only client on `real` whose first read of `heldKey` answers only after `until`. */
function holdingFirstRead(
  real: Redis,
  heldKey: string,
  until: Promise<void>,
): { client: RedisScriptClient; missed: Promise<void> } {
  const missed = deferred();
  let held = false;
  const client: RedisScriptClient = {
    async eval(script, numkeys, ...args) {
      const reply: unknown = await real.eval(script, numkeys, ...args);
      if (!held && numkeys === 1 && args[0] === heldKey) {
        held = true;
        expect(reply).toBeNull(); // the leader has stored nothing yet
        missed.resolve();
        await until;
      }
      return reply;
    },
  };
  return { client, missed: missed.promise };
}

describe('share: a polling waiter whose read came just before the release', () => {
  it('wins the freed lock, finds the result the release stored, and does not run the method', async () => {
    const namespace = 'share-race:';
    const leaderReal = server.client();
    const leaderLock = new RedisLockService({ redis: leaderReal, namespace });
    const key = leaderLock.redisKey('report');
    const leaderDone = deferred();
    const waiterReal = server.client();
    const { client, missed } = holdingFirstRead(waiterReal, resultKey(key), leaderDone.promise);
    const waiterLock = new RedisLockService({ redis: client, namespace });
    const options = { logger: silent, share: true, lockTimeout: 10 };
    const leader = new SingleFlightEngine({ lock: leaderLock, options });
    const waiter = new SingleFlightEngine({ lock: waiterLock, options });
    const runs: string[] = [];
    const building = deferred();

    const leading = leader.run('report', async () => {
      runs.push('leader');
      building.resolve();
      await missed; // the waiter has read the result and found none
      return { total: 42 };
    });
    await building.promise;
    const waiting = waiter.run('report', () => {
      runs.push('waiter');
      return { total: -1 };
    });
    expect(await leading).toEqual({ total: 42 });
    // The release stored the result and freed the lock; only now the waiter hears its miss.
    expect(await admin.exists(key)).toBe(0);
    expect(await admin.exists(resultKey(key))).toBe(1);
    leaderDone.resolve();

    expect(await waiting).toEqual({ total: 42 });
    expect(runs).toEqual(['leader']);
    // It took the lock, read the result, and let go of the lock again.
    expect(await admin.exists(key)).toBe(0);
    leader.close();
    waiter.close();
    leaderReal.disconnect();
    waiterReal.disconnect();
  });
});
