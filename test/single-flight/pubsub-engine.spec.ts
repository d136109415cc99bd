import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { PubSubWaitStrategy } from '../../lib/single-flight/pubsub-wait.strategy.js';
import { SingleFlightEngine } from '../../lib/single-flight/single-flight.engine.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

describe('the engine’s WaitStrategy seam takes the pub/sub strategy', () => {
  it('3 workers × 20 callers on one key: one run per worker, never overlapping, nobody waits out the TTL', async () => {
    const ttl = 60; // no caller may need a backstop: a minute is far beyond this test's timeout
    const engines = Array.from({ length: 3 }, () => {
      const lock = new RedisLockService({ redis: () => server.client(), namespace: 'pe:', ttl });
      return new SingleFlightEngine({
        lock,
        waitStrategy: new PubSubWaitStrategy({ client: () => lock.getClient() }),
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
