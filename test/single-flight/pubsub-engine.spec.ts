import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { releaseSubscriberFor } from '../../lib/single-flight/release-subscriber.js';
import { SingleFlightEngine } from '../../lib/single-flight/single-flight.engine.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

describe('the engine wakes waiters on release', () => {
  it('3 workers × 20 callers on one key: one run per worker, never overlapping, nobody waits out the TTL', async () => {
    const ttl = 60; // no caller may need a backstop: a minute is far beyond this test's timeout
    const engines = Array.from({ length: 3 }, () => {
      const lock = new RedisLockService({ redis: () => server.client(), namespace: 'pe:', ttl });
      return new SingleFlightEngine({
        lock,
        options: { lockTimeout: 50, ttl, logger: { log() {}, warn() {}, error() {} } },
      });
    });
    let running = 0;
    let maxRunning = 0;
    let runs = 0;
    const work = async (): Promise<number> => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      await new Promise((r) => setTimeout(r, 2));
      runs++;
      running--;
      return runs;
    };
    const results = await Promise.all(
      engines.flatMap((engine) => Array.from({ length: 20 }, () => engine.run('cold', work))),
    );
    expect(maxRunning).toBe(1);
    // In each worker the 20 callers are one flight: its leader runs, the 19 others share its value.
    expect(runs).toBe(3);
    expect(results.toSorted((a, b) => a! - b!)).toEqual(
      [1, 2, 3].flatMap((run) => Array(20).fill(run)),
    );
  });
});

describe('the engine when Redis refuses the wake-up subscription', () => {
  it('two workers on one key both finish long before lockTimeout, and the refusal is logged once', async () => {
    await server
      .client()
      .call('ACL', 'SETUSER', 'nosub', 'on', '>pw', '~*', '&*', '+@all', '-ssubscribe');
    const ttl = 30;
    const lockTimeout = 10;
    const loggers = [new MemoryLogger(), new MemoryLogger()];
    const clients = loggers.map(() => server.client({ username: 'nosub', password: 'pw' }));
    const locks = clients.map(
      (client) => new RedisLockService({ redis: client, namespace: 'pe:acl:', ttl }),
    );
    const engines = locks.map(
      (lock, i) =>
        new SingleFlightEngine({ lock, options: { lockTimeout, ttl, logger: loggers[i] } }),
    );
    let running = 0;
    let maxRunning = 0;
    const locked: boolean[] = [];
    const work = async (): Promise<void> => {
      running++;
      maxRunning = Math.max(maxRunning, running);
      locked.push(currentFlight()?.locked === true);
      await new Promise((r) => setTimeout(r, 200));
      running--;
    };
    const started = Date.now();
    await Promise.all(engines.map((engine) => engine.run('cold', work)));
    // Both ran under the lock, one after the other; the second did not wait out TTL or lockTimeout.
    expect(locked).toEqual([true, true]);
    expect(maxRunning).toBe(1);
    expect(Date.now() - started).toBeLessThan(3000);
    const warnings = loggers.flatMap((logger) => logger.at('warn'));
    expect(warnings).toEqual([
      "Redis wake-up subscription failed: NOPERM this user has no permissions to run the 'ssubscribe' command; waiting callers poll until it works again",
    ]);
    expect(loggers.flatMap((logger) => logger.at('error'))).toEqual([]);
    for (const client of clients) releaseSubscriberFor(client).close();
  });
});
