import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  calls,
  compileWorkers,
  figures,
  loadFigures,
  sleep,
  startWorkers,
  type FaultWorker,
} from './fault-helpers.js';

/**
 * Redis paused (SIGSTOP) under load: a paused server keeps its connections and answers nothing, so
 * only the client's commandTimeout ends a call's wait. 3 worker processes, each with 4 loops of
 * @SingleFlight calls on keys of their own, on the module's fail-fast client with a
 * commandTimeout below FAIL_FAST_CLIENT_DEFAULTS's.
 */

const COMMAND_TIMEOUT = 400;
const PAUSE_MS = 1500;
/** Load before the pause, the pause, and after SIGCONT. */
const BEFORE_MS = 300;
const AFTER_MS = 1200;

let server: RedisServer;
let workers: FaultWorker[] = [];
beforeAll(async () => {
  await compileWorkers();
  server = await startRedis();
  workers = await startWorkers(3, {
    REDIS_URL: server.url,
    NS: 'pause:',
    TTL: '2',
    LOCK_TIMEOUT: '1',
    CLIENT: 'fail-fast',
    COMMAND_TIMEOUT: String(COMMAND_TIMEOUT),
  });
}, 120_000);
afterAll(async () => {
  server.resume();
  await Promise.all(workers.map((w) => w.stop()));
  await server.stop();
});

describe('Redis paused (SIGSTOP) under load, on the fail-fast client', () => {
  it(`every call returns within commandTimeout (${COMMAND_TIMEOUT} ms) + 50 ms, and after SIGCONT the lock is used again within 1 s`, async () => {
    expect(COMMAND_TIMEOUT).toBeLessThan(FAIL_FAST_CLIENT_DEFAULTS.commandTimeout);
    const loads = workers.map((worker, i) =>
      calls(worker, {
        cmd: 'load',
        prefix: `w${i}:`,
        loops: 4,
        durationMs: BEFORE_MS + PAUSE_MS + AFTER_MS,
        gapMs: 20,
      }),
    );
    await sleep(BEFORE_MS);
    const pausedAt = Date.now();
    server.pause();
    await sleep(PAUSE_MS);
    server.resume();
    const resumedAt = Date.now();
    const seen = loadFigures((await Promise.all(loads)).flat(), pausedAt, resumedAt);
    figures(`redis SIGSTOP ${PAUSE_MS} ms (commandTimeout ${COMMAND_TIMEOUT} ms)`, { ...seen });

    expect(seen.errors).toBe(0);
    expect(seen.during).toBeGreaterThan(0);
    expect(seen.maxLatencyMs).toBeLessThanOrEqual(COMMAND_TIMEOUT + 50);
    expect(seen.relockMs).toBeLessThan(1000);
  });
});
