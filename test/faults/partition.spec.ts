import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
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
 * A network partition between the workers and Redis: every connection goes through a TCP proxy
 * that starts forwarding nothing either way (a blackhole), while the sockets stay open. The
 * client sees no error and no close, only silence, until commandTimeout. 3 worker processes, each
 * with 4 loops of @SingleFlight calls on keys of their own, on the module's fail-fast client.
 */

const COMMAND_TIMEOUT = 400;
const PARTITION_MS = 2000;
const BEFORE_MS = 400;
const AFTER_MS = 1500;

let server: RedisServer;
let proxy: TcpProxy;
let workers: FaultWorker[] = [];
beforeAll(async () => {
  await compileWorkers();
  server = await startRedis();
  proxy = await startTcpProxy(server.port);
  workers = await startWorkers(3, {
    REDIS_URL: proxy.url,
    NS: 'partition:',
    TTL: '2',
    LOCK_TIMEOUT: '1',
    CLIENT: 'fail-fast',
    COMMAND_TIMEOUT: String(COMMAND_TIMEOUT),
  });
}, 120_000);
afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await proxy.close();
  await server.stop();
});

describe('a network partition (a proxy that blackholes every connection) under load', () => {
  it(`every call returns within commandTimeout (${COMMAND_TIMEOUT} ms) + 50 ms, and once traffic passes again the lock is used again within 1 s`, async () => {
    const connections = proxy.connections;
    const loads = workers.map((worker, i) =>
      calls(worker, {
        cmd: 'load',
        prefix: `w${i}:`,
        loops: 4,
        durationMs: BEFORE_MS + PARTITION_MS + AFTER_MS,
        gapMs: 5,
      }),
    );
    await sleep(BEFORE_MS);
    const cutOffAt = Date.now();
    proxy.setMode({ kind: 'blackhole' });
    await sleep(PARTITION_MS);
    // Nothing was closed: the clients saw silence, not an error.
    expect(proxy.connections).toBeGreaterThanOrEqual(connections);
    proxy.setMode({ kind: 'pass' });
    const healedAt = Date.now();
    const seen = loadFigures((await Promise.all(loads)).flat(), cutOffAt, healedAt);
    figures(`partition (blackhole) ${PARTITION_MS} ms (commandTimeout ${COMMAND_TIMEOUT} ms)`, {
      ...seen,
    });

    expect(seen.errors).toBe(0);
    expect(seen.during).toBeGreaterThan(0);
    expect(seen.maxLatencyMs).toBeLessThanOrEqual(COMMAND_TIMEOUT + 50);
    expect(seen.relockMs).toBeLessThan(1000);
  });
});
