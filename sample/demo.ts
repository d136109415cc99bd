/**
 * The stampede demo: many concurrent requests ask for one report. Three rounds: a cold key behind
 * a plain cache-aside with no lock (every request that misses builds), a cold key behind @Cached
 * (one builds, the rest wait for it), and a stale key behind @Cached (everyone is served the stale
 * report at once, one refreshes it).
 *
 *   npm run demo                      # 3 workers, 300 requests, 500 ms builds
 *   npm run demo -- --workers 4 --requests 1000 --json
 *
 * Where it runs:
 * - REDIS_URL set: several workers (node:cluster) share that Redis; if it does not answer, the demo
 *   says so and exits 1. REDIS_URL=memory:// asks for the one-process run below.
 * - REDIS_URL unset: a throwaway redis-server of its own on a free port (when redis-server is on
 *   PATH), stopped at the end; the workers share it. A Redis nobody named (one on 6379, say) is
 *   never written to.
 * - No Redis at all: one process, one Nest app on the library's in-memory backend (memory://),
 *   which coordinates this process only; the same rounds, against that app.
 */
import cluster, { type Worker } from 'node:cluster';
import { spawnSync } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { startRedis, type RedisServer } from '../test/support/redis-server.js';

/** The report cache: fresh for TTL_S, then served stale for a long grace. */
const TTL_S = 5;
const GRACE_S = 600;

/** How to see the run across processes, after a one-process run (one line each). */
const CROSS_PROCESS_HINT = [
  'To see several worker processes share one Redis, install redis-server',
  '(`sudo apt-get install redis-server` on Debian/Ubuntu, `brew install redis` on macOS)',
  'or set REDIS_URL to a Redis, then run `npm run demo` again.',
];

const OPTIONS = 'options: --workers N, --requests N, --build-ms N, --json';

/** A reason to stop that the user can act on: printed as one line, without a stack trace. */
class DemoError extends Error {}

interface Round {
  label: string;
  builds: number;
  answered: number;
  slowestMs: number;
}

/** Where the rounds run: workers sharing a Redis, or one process on the in-memory backend. */
type Backend =
  | { mode: 'cluster'; url: string; note: string; throwaway?: RedisServer }
  | { mode: 'one-process'; note: string };

async function answers(url: string): Promise<boolean> {
  const probe = new Redis(url, {
    lazyConnect: true,
    retryStrategy: () => null,
    connectTimeout: 1000,
    maxRetriesPerRequest: 0,
  });
  probe.on('error', () => {});
  try {
    await probe.connect();
    return (await probe.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

function redisServerOnPath(): boolean {
  const probe = spawnSync('redis-server', ['--version'], { stdio: 'ignore' });
  return !probe.error && probe.status === 0;
}

async function backend(redactUrl: (url: string) => string): Promise<Backend> {
  const explicit = process.env.REDIS_URL;
  if (explicit?.startsWith('memory://')) {
    return { mode: 'one-process', note: 'none (REDIS_URL is memory://)' };
  }
  if (explicit) {
    if (await answers(explicit))
      return { mode: 'cluster', url: explicit, note: redactUrl(explicit) };
    throw new DemoError(
      `no Redis answers at ${redactUrl(explicit)} (REDIS_URL). ` +
        'Start it, or unset REDIS_URL to run the one-process demo.',
    );
  }
  if (redisServerOnPath()) {
    const throwaway = await startRedis();
    return {
      mode: 'cluster',
      url: throwaway.url,
      note: `${throwaway.url} (throwaway redis-server)`,
      throwaway,
    };
  }
  return {
    mode: 'one-process',
    note: 'none (REDIS_URL unset, no redis-server on PATH)',
  };
}

const buildsOf = async (base: string, id: string): Promise<number> =>
  ((await (await fetch(`${base}/reports/${id}/builds`)).json()) as { builds: number }).builds;

/**
 * `requests` concurrent GETs of one report (`path` after its id), and the builds they caused,
 * counted `settleMs` after the last reply (a background refresh counts too).
 */
async function round(
  label: string,
  base: string,
  requests: number,
  id: string,
  { path = '', settleMs = 0 } = {},
) {
  const before = await buildsOf(base, id);
  const replies = await Promise.all(
    Array.from({ length: requests }, async () => {
      const started = performance.now();
      const reply = await fetch(`${base}/reports/${id}${path}`);
      const ok = reply.ok && (await reply.json()) !== undefined;
      return { ok, ms: performance.now() - started };
    }),
  );
  await sleep(settleMs);
  return {
    label,
    builds: (await buildsOf(base, id)) - before,
    answered: replies.filter((reply) => reply.ok).length,
    slowestMs: Math.max(...replies.map((reply) => reply.ms)),
  } satisfies Round;
}

/** The measured rounds against the app at `base` (one process, or the workers behind one port). */
async function measure(base: string, requests: number, buildMs: number) {
  const run = `${Date.now().toString(36)}-${process.pid}`; // cold keys for every run
  // An unmeasured round first, so that the measured ones find a warm app: HTTP connections open,
  // code compiled, Redis connections made.
  await round('warm-up', base, requests, `warm-up-${run}`);
  await round('warm-up', base, requests, `warm-up-${run}`, { path: '/unlocked' });
  // The stale key: built once, then left to pass its ttl (well within its grace).
  await fetch(`${base}/reports/stale-${run}`);
  const staleAt = performance.now() + TTL_S * 1000 + 100;
  const noLock = await round('no lock', base, requests, `no-lock-${run}`, { path: '/unlocked' });
  const cold = await round('@Cached, cold key', base, requests, `cold-${run}`);
  // The floor of every row: the same requests as fresh hits (the key just built).
  const hits = await round('fresh hits', base, requests, `cold-${run}`);
  await sleep(Math.max(0, staleAt - performance.now()));
  const stale = await round('@Cached, stale key', base, requests, `stale-${run}`, {
    settleMs: buildMs + 500,
  });
  return { rounds: [noLock, cold, stale], hits };
}

/** Forks `workers` sample apps sharing `redisUrl` and one port; runs the rounds; stops them. */
async function inCluster(workers: number, redisUrl: string, requests: number, buildMs: number) {
  const forked: Worker[] = [];
  try {
    const ports = await Promise.all(
      Array.from({ length: workers }, () => {
        // Port 0: the primary picks a free port once and every worker shares it.
        const worker = cluster.fork({ REDIS_URL: redisUrl, PORT: '0' });
        forked.push(worker);
        return new Promise<number>((resolve, reject) => {
          worker.once('listening', (address) => resolve(address.port));
          worker.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
        });
      }),
    );
    return await measure(`http://127.0.0.1:${ports[0]}`, requests, buildMs);
  } finally {
    await Promise.all(
      forked.map(
        (worker) =>
          new Promise<void>((resolve) => {
            if (worker.isDead()) return resolve();
            worker.once('exit', () => resolve());
            worker.process.kill('SIGTERM'); // enableShutdownHooks: app.close(), then exit
          }),
      ),
    );
  }
}

/** One sample app in this process on the in-memory backend; runs the rounds; closes it. */
async function inProcess(requests: number, buildMs: number) {
  process.env.REDIS_URL = 'memory://';
  const { bootstrap } = await import('./main.js');
  const app = await bootstrap(0);
  try {
    return await measure(await app.getUrl(), requests, buildMs);
  } finally {
    await app.close();
  }
}

function print(rounds: Round[], requests: number): void {
  const rows = [
    ['', 'builds', 'answered', 'slowest caller'],
    ...rounds.map((r) => [
      r.label,
      String(r.builds),
      `${r.answered}/${requests}`,
      `${Math.round(r.slowestMs)} ms`,
    ]),
  ];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows) {
    console.log(
      '  ' +
        row
          .map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
          .join('   '),
    );
  }
}

function positiveInteger(flag: string, value: string): number {
  const parsed = Number(value);
  if (!Number.isInteger(parsed) || parsed < 1) {
    throw new DemoError(`--${flag} takes a whole number of at least 1, not "${value}".`);
  }
  return parsed;
}

async function primary(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        workers: { type: 'string', default: '3' },
        requests: { type: 'string', default: '300' },
        'build-ms': { type: 'string', default: '500' },
        json: { type: 'boolean', default: false },
      },
    }));
  } catch (error) {
    throw new DemoError(`${(error as Error).message} (${OPTIONS})`);
  }
  const requests = positiveInteger('requests', values.requests);
  const buildMs = positiveInteger('build-ms', values['build-ms']);
  // Set before the sample's modules load (the workers inherit them): the report cache's ttl and
  // grace are read once, when the controller's decorator is evaluated.
  Object.assign(process.env, {
    BUILD_MS: String(buildMs),
    REPORT_TTL: String(TTL_S),
    REPORT_GRACE: String(GRACE_S),
    QUIET: '1',
  });
  const { redactUrl } = await import('./config.js');
  const where = await backend(redactUrl);
  const workers = where.mode === 'cluster' ? positiveInteger('workers', values.workers) : 1;
  let measured;
  try {
    measured =
      where.mode === 'cluster'
        ? await inCluster(workers, where.url, requests, buildMs)
        : await inProcess(requests, buildMs);
  } finally {
    if (where.mode === 'cluster') await where.throwaway?.stop();
  }
  const { rounds, hits } = measured;
  const oneProcess = where.mode === 'one-process';
  if (values.json) {
    console.log(
      JSON.stringify({
        mode: where.mode,
        redis: where.note,
        workers,
        requests,
        buildMs,
        rounds,
        hitsSlowestMs: hits.slowestMs,
        ...(oneProcess && { crossProcess: CROSS_PROCESS_HINT.join(' ') }),
      }),
    );
    return;
  }
  console.log(`nestjs-buffer-lock demo`);
  console.log(`  Redis: ${where.note}`);
  console.log(
    (oneProcess
      ? `  One process, on the in-memory backend (memory://)`
      : `  ${workers} workers (node:cluster)`) +
      `, ${requests} concurrent requests for one report per row, ` +
      `${buildMs} ms per build\n  (the stale key: past its ${TTL_S} s ttl, within its ${GRACE_S} s grace)\n`,
  );
  print(rounds, requests);
  console.log(
    `\n  For scale, ${requests} fresh hits here: slowest caller ${Math.round(hits.slowestMs)} ms ` +
      `(builds: ${hits.builds}).`,
  );
  if (oneProcess) {
    console.log(
      [
        '',
        'This ran in one process: the in-memory backend coordinates this process only.',
        ...CROSS_PROCESS_HINT,
      ].join('\n  '),
    );
  }
}

if (cluster.isPrimary) {
  try {
    await primary();
  } catch (error) {
    if (!(error instanceof DemoError)) throw error;
    console.error(`demo: ${error.message}`);
    process.exitCode = 1;
  }
} else {
  const { bootstrap } = await import('./main.js');
  await bootstrap(Number(process.env.PORT));
}
