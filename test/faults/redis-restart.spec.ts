import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  builds,
  calls,
  compileWorkers,
  figures,
  sleep,
  startWorkers,
  type Call,
  type FaultWorker,
} from './fault-helpers.js';

/**
 * Redis killed (SIGKILL) and started again on the same port while a stampede waits on one key:
 * 3 worker processes × 5 concurrent callers, a build of 1 s. The new server has no data, so the
 * lock the holder took is gone: one waiter takes it again and builds (the one extra build), the
 * others wait for that build, and nobody waits for the whole lockTimeout.
 */

const WORKERS = 3;
const CALLERS = 5;
const BUILD_MS = 1000;
const TTL = 5;
const LOCK_TIMEOUT = 4;

let server: RedisServer;
beforeAll(async () => {
  await compileWorkers();
  server = await startRedis();
}, 120_000);
afterAll(() => server.stop());

const clients: [string, Record<string, string>][] = [
  ['the module-built fail-fast client (no offline queue)', { CLIENT: 'fail-fast' }],
  ['a default ioredis client from a factory (offline queue)', {}],
];

for (const [name, clientEnv] of clients) {
  describe(`Redis SIGKILLed and restarted mid-stampede, ${name}`, () => {
    let workers: FaultWorker[] = [];
    afterAll(() => Promise.all(workers.map((w) => w.stop())));

    it('answers every caller with at most one extra build, wakes the waiters after the restart and locks again within 1 s', async () => {
      const ns = `restart:${clientEnv['CLIENT'] ?? 'default'}:`;
      workers = await startWorkers(WORKERS, {
        REDIS_URL: server.url,
        NS: ns,
        TTL: String(TTL),
        LOCK_TIMEOUT: String(LOCK_TIMEOUT),
        REPORT: '1',
        ...clientEnv,
      });
      const key = 'stampede';
      const [first, ...rest] = workers;
      const answers: Promise<readonly Call[]>[] = [
        calls(first!, { cmd: 'calls', key, callers: CALLERS, buildMs: BUILD_MS }),
      ];
      // The holder builds; the others arrive while it does, and wait.
      while (!first!.events.some((e) => e.event === 'acquired')) await sleep(5);
      for (const worker of rest) {
        answers.push(calls(worker, { cmd: 'calls', key, callers: CALLERS, buildMs: BUILD_MS }));
      }
      await sleep(300);
      const killedAt = Date.now();
      await server.restart(); // resolves once the new server answers PING
      const answeringAt = Date.now();
      const all = (await Promise.all(answers)).flat();

      const ran = builds(workers);
      const lastAnswer = Math.max(...all.map((c) => c.resolvedAt));
      const reacquired = workers
        .flatMap((w) => w.events)
        .flatMap((e) => (e.event === 'acquired' && e.at >= killedAt ? [e.at] : []));
      // Negative when a worker's client was back before the test's own PING saw the new server.
      const relock = Math.min(...reacquired) - answeringAt;
      figures(`redis SIGKILL+restart mid-stampede (${clientEnv['CLIENT'] ?? 'default'} client)`, {
        callers: all.length,
        builds: ran.length,
        unlockedBuilds: ran.filter((b) => b.fence === undefined).length,
        downMs: answeringAt - killedAt,
        lastAnswerAfterRestartMs: lastAnswer - answeringAt,
        relockAfterRestartMs: relock,
      });

      expect(all).toHaveLength(WORKERS * CALLERS);
      expect(all.filter((c) => c.error !== undefined)).toEqual([]);
      expect(ran.length).toBeGreaterThanOrEqual(1);
      expect(ran.length).toBeLessThanOrEqual(2);
      // Woken once the new server is there, not by the end of lockTimeout.
      expect(lastAnswer - answeringAt).toBeLessThan(LOCK_TIMEOUT * 1000);
      expect(reacquired.length).toBeGreaterThan(0);
      expect(relock).toBeLessThan(1000);
    });
  });
}
