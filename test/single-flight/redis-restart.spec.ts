import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RedisOptions } from 'ioredis';
import { releaseChannel } from '../../lib/redis/keys.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import {
  ReleaseSubscriber,
  releaseSubscriberFor,
} from '../../lib/single-flight/release-subscriber.js';
import { SingleFlightEngine } from '../../lib/single-flight/single-flight.engine.js';
import { MemoryLogger, deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { countingLock, pubsubClients, sleep } from './support.js';

let server: RedisServer;
let dir: string;
beforeAll(async () => {
  // Every write is on disk before it is answered: a lock taken before a SIGKILL is still there
  // after the restart, as with a Redis that persists its data.
  dir = mkdtempSync(join(tmpdir(), 'buffer-lock-restart-'));
  server = await startRedis(['--appendonly', 'yes', '--appendfsync', 'always', '--dir', dir]);
});
afterAll(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** SSUBSCRIBErs the server counts on `channel` now. */
async function receivers(channel: string): Promise<number> {
  const reply = (await server.client().call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
  return Number(reply[1]);
}

describe('release subscriber: Redis killed (SIGKILL) and restarted on the same port', () => {
  const clients: [string, RedisOptions][] = [
    ['a client as ioredis makes it', {}],
    ['a client made with autoResubscribe: false', { autoResubscribe: false }],
  ];
  for (const [name, options] of clients) {
    it(`${name}: a listener that kept listening hears the next release on the new server`, async () => {
      const subscriber = new ReleaseSubscriber(server.client(options), {
        idleMs: 0,
        retryMs: 60_000, // no retry by the clock in this test: only the reconnect can end it
      });
      const channel = releaseChannel(`rr:kept:${options.autoResubscribe ?? 'default'}`);
      const heard: string[] = [];
      const listening = subscriber.listen(channel, () => heard.push('woken'));
      expect(await listening.ready).toBe(true);
      await server.restart();
      // The failure wakes it once (its waiter tries again); then it keeps listening.
      await until(() => heard.length === 1);
      await until(() => subscriber.usable);
      expect(await receivers(channel)).toBe(1);
      await server.client().call('SPUBLISH', channel, 'released');
      await until(() => heard.length === 2);
      expect(heard).toEqual(['woken', 'woken']);
      // The same connection, reconnected: the new server sees one pub/sub connection.
      expect(await pubsubClients(server.client())).toHaveLength(1);
      listening.close();
      subscriber.close();
    });
  }

  it('the cool-down ends once the connection is ready again: a new listener subscribes at once', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 60_000, retryMs: 60_000 });
    const first = subscriber.listen(releaseChannel('rr:cool:a'), () => {});
    expect(await first.ready).toBe(true);
    first.close();
    const started = Date.now();
    await server.restart();
    await until(() => !subscriber.usable);
    // Redis is back: a listener waits for the release message again instead of polling.
    let ready = false;
    while (!ready) {
      const next = subscriber.listen(releaseChannel('rr:cool:b'), () => {});
      ready = await next.ready;
      next.close();
      if (!ready) await sleep(20);
      expect(Date.now() - started).toBeLessThan(10_000); // far below retryMs
    }
    console.log(`subscription renewed ${Date.now() - started} ms after the SIGKILL (retryMs 60 s)`);
    expect(subscriber.usable).toBe(true);
    subscriber.close();
  });
});

describe('a stampede across a Redis restart: waiters are woken by the release after it', () => {
  it('6 workers on one key: the holder releases after the restart, the 5 waiters then run one by one under the lock, long before lockTimeout', async () => {
    const ttl = 30;
    const lockTimeout = 20;
    const workers = Array.from({ length: 6 }, () => {
      // Commands wait in the offline queue while the server is down: nobody fails open here.
      const counted = countingLock(
        new RedisLockService({ redis: server.client(), namespace: 'rr:stampede:', ttl }),
      );
      const logger = new MemoryLogger();
      const engine = new SingleFlightEngine({
        lock: counted.lock,
        options: { lockTimeout, ttl, logger },
      });
      return { ...counted, engine, logger };
    });
    const order: string[] = [];
    let running = 0;
    let maxRunning = 0;
    const holderMayFinish = deferred();
    const holderRuns = deferred();
    const work = (i: number) => async (): Promise<void> => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      order.push(`run${i}:${currentFlight()?.locked === true ? 'locked' : 'unlocked'}`);
      if (i === 0) {
        holderRuns.resolve();
        await holderMayFinish.promise;
      } else {
        await sleep(20);
      }
      running--;
    };
    const holder = workers[0]!.engine.run('cold', work(0));
    await holderRuns.promise;
    const waiters = workers.slice(1).map(({ engine }, i) => engine.run('cold', work(i + 1)));
    const lockKey = workers[0]!.lock.redisKey('cold');
    await until(async () => (await receivers(releaseChannel(lockKey))) === 5);
    await server.restart();
    const restarted = workers.map(({ acquires }) => acquires());
    await sleep(1500); // the build goes on after the restart
    const tries = workers.map(({ acquires }, i) => acquires() - restarted[i]!);
    const released = Date.now();
    order.push('holder done');
    holderMayFinish.resolve();
    await Promise.all([holder, ...waiters]);
    const elapsed = Date.now() - released;
    console.log(
      `5 waiters done ${elapsed} ms after the holder's release (lockTimeout ${lockTimeout} s); ` +
        `lock tries per waiter in the 1.5 s after the restart: ${tries.slice(1).join(', ')}`,
    );
    expect(order[0]).toBe('run0:locked');
    expect(order[1]).toBe('holder done');
    expect(order.slice(2).toSorted()).toEqual(
      [1, 2, 3, 4, 5].map((i) => `run${i}:locked`).toSorted(),
    );
    expect(maxRunning).toBe(1);
    expect(elapsed).toBeLessThan(5000);
    // Redis back, the waiters wait for the release message: a few tries each while their wake-up
    // connection reconnects, not a poll every 50 ms through the subscriber's 1 s cool-down (16+).
    for (const count of tries.slice(1)) expect(count).toBeLessThanOrEqual(8);
    for (const { logger } of workers) expect(logger.at('error')).toEqual([]);
    for (const { lock } of workers) releaseSubscriberFor((await lock.getClient()) as never).close();
  });
});
