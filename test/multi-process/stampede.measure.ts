/**
 * Measures @SingleFlight (share: true) across 3 real worker processes on a Redis of its own:
 * - wake latency: from the leader's end of work (just before its store+release script) to the last
 *   of the 600 callers resolving, per stampede (median and p99 over ROUNDS stampedes);
 * - Redis commands per stampede, from INFO commandstats deltas (the server is this script's own,
 *   so nothing else is counted);
 * - p99 call latency with the server paused (SIGSTOP), before and after the breaker opens.
 *
 *   npx tsc -p test/multi-process/tsconfig.json && node .build/multi-process/test/multi-process/stampede.measure.js
 */
import 'reflect-metadata';
import { connectFailFast, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { startRedis } from '../support/redis-server.js';
import { Worker, type Result } from './flight.workers.js';

const ROUNDS = Number(process.env['ROUNDS'] ?? 40);
const CALLERS = 200;

const quantile = (values: readonly number[], q: number): number => {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
};

const server = await startRedis();
const admin = server.client();
const commandCalls = async (): Promise<Map<string, number>> =>
  new Map(
    [...String(await admin.info('commandstats')).matchAll(/cmdstat_([^:]+):calls=(\d+)/g)].map(
      ([, name, n]) => [name!, Number(n)],
    ),
  );

try {
  const workers = await Promise.all(
    [0, 1, 2].map(() => Worker.start({ REDIS_URL: server.url, NS: 'measure:', TTL: '10' })),
  );
  // One warm-up stampede: scripts loaded (EVALSHA hits), connections made.
  await Promise.all(
    workers.map((w) => w.ask({ cmd: 'flight', key: 'warm', callers: CALLERS, buildMs: 100 })),
  );
  const wake: number[] = [];
  const perStampede: Map<string, number>[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const before = await commandCalls();
    const replies = await Promise.all(
      workers.map((w) =>
        w.ask<Result>({ cmd: 'flight', key: `k${round}`, callers: CALLERS, buildMs: 200 }),
      ),
    );
    const after = await commandCalls();
    const delta = new Map<string, number>();
    for (const [name, n] of after) {
      const d = n - (before.get(name) ?? 0);
      if (d > 0 && name !== 'info') delta.set(name, d);
    }
    perStampede.push(delta);
    const results = replies.flatMap((r) => r.results);
    if (replies.reduce((s, r) => s + r.runs, 0) !== 1) throw new Error('more than one run');
    const released = results[0]!.value.finishedAt;
    wake.push(Math.max(...results.map((r) => r.resolvedAt)) - released);
  }
  await Promise.all(workers.map((w) => w.stop()));

  console.log(`3 processes × ${CALLERS} callers, share: true, ${ROUNDS} stampedes`);
  console.log(
    `leader's release → last caller resolved: median ${quantile(wake, 0.5)} ms, p99 ${quantile(wake, 0.99)} ms`,
  );
  const names = [...new Set(perStampede.flatMap((d) => [...d.keys()]))].toSorted();
  const median = (name: string): number =>
    quantile(
      perStampede.map((d) => d.get(name) ?? 0),
      0.5,
    );
  const total = quantile(
    perStampede.map((d) => [...d.values()].reduce((a, b) => a + b, 0)),
    0.5,
  );
  console.log(
    `Redis commands per stampede (median, INFO commandstats; commands inside scripts counted too): ` +
      `${names.map((n) => `${n} ${median(n)}`).join(', ')}; total ${total}`,
  );

  // Outage: one process, a fail-fast client (commandTimeout 1 s), breaker defaults (5 failures, 10 s).
  const lock = new RedisLockService({ redis: () => connectFailFast(server.url), namespace: 'o:' });
  const engine = new SingleFlightEngine({
    lock,
    options: { logger: { log() {}, warn() {}, error() {} } },
  });
  await engine.run('warm', () => 1);
  let open = false;
  engine.on('breaker', (state) => (open = state === 'open'));
  server.pause();
  const beforeOpen: number[] = [];
  const afterOpen: number[] = [];
  for (let i = 0; i < 1000; i++) {
    const wasOpen = open;
    const start = performance.now();
    await engine.run(`outage-${i}`, () => 1);
    (wasOpen ? afterOpen : beforeOpen).push(performance.now() - start);
  }
  server.resume();
  console.log(
    `Redis paused (commandTimeout ${FAIL_FAST_CLIENT_DEFAULTS.commandTimeout} ms): ` +
      `p99 before the breaker opens ${quantile(beforeOpen, 0.99).toFixed(0)} ms (${beforeOpen.length} calls), ` +
      `after ${quantile(afterOpen, 0.99).toFixed(3)} ms (${afterOpen.length} calls)`,
  );
} finally {
  server.resume();
  await server.stop();
}
process.exit(0);
