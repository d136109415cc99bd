/**
 * The stampede demo: several workers (node:cluster) share one Redis; many concurrent requests ask
 * for one report. Three rounds: a cold key behind a plain cache-aside with no lock (every request
 * that misses builds), a cold key behind @Cached (one worker builds, the rest wait for it), and a
 * stale key behind @Cached (everyone is served the stale report at once, one worker refreshes it).
 *
 *   npm run demo                      # 3 workers, 300 requests, 500 ms builds
 *   npm run demo -- --workers 4 --requests 1000 --json
 *
 * Uses REDIS_URL (default redis://127.0.0.1:6379). If nothing answers there and redis-server is on
 * PATH, it starts a throwaway server on a free port and stops it at the end.
 */
import cluster, { type Worker } from 'node:cluster';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { startRedis, type RedisServer } from '../test/support/redis-server.js';
import { redactUrl } from './config.js';
import { bootstrap } from './main.js';

const DEFAULT_URL = 'redis://127.0.0.1:6379';

/** The workers' report cache: fresh for TTL_S, then served stale for a long grace. */
const TTL_S = 5;
const GRACE_S = 600;

interface Round {
  label: string;
  builds: number;
  answered: number;
  slowestMs: number;
}

async function answers(url: string): Promise<boolean> {
  const probe = new Redis(url, {
    lazyConnect: true,
    retryStrategy: () => null,
    connectTimeout: 1000,
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

/** The Redis URL to use, and the throwaway server started for it, if any. */
async function redis(): Promise<{ url: string; note: string; throwaway?: RedisServer }> {
  const url = process.env.REDIS_URL ?? DEFAULT_URL;
  if (await answers(url)) return { url, note: `${redactUrl(url)} (already running)` };
  if (process.env.REDIS_URL) throw new Error(`no Redis answers at ${redactUrl(url)}`);
  const throwaway = await startRedis(); // exits with an install hint when redis-server is missing
  return { url: throwaway.url, note: `${throwaway.url} (throwaway redis-server)`, throwaway };
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

async function primary(): Promise<void> {
  const { values } = parseArgs({
    options: {
      workers: { type: 'string', default: '3' },
      requests: { type: 'string', default: '300' },
      'build-ms': { type: 'string', default: '500' },
      json: { type: 'boolean', default: false },
    },
  });
  const workers = Number(values.workers);
  const requests = Number(values.requests);
  const { url: redisUrl, note, throwaway } = await redis();
  // Port 0: the primary picks a free port once and every worker shares it.
  const env = {
    REDIS_URL: redisUrl,
    PORT: '0',
    BUILD_MS: values['build-ms'],
    REPORT_TTL: String(TTL_S),
    REPORT_GRACE: String(GRACE_S),
    QUIET: '1',
  };
  const forked: Worker[] = [];
  try {
    const ports = await Promise.all(
      Array.from({ length: workers }, () => {
        const worker = cluster.fork(env);
        forked.push(worker);
        return new Promise<number>((resolve, reject) => {
          worker.once('listening', (address) => resolve(address.port));
          worker.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
        });
      }),
    );
    const base = `http://127.0.0.1:${ports[0]}`;
    const run = `${Date.now().toString(36)}-${process.pid}`; // cold keys for every run
    const buildMs = Number(values['build-ms']);
    // An unmeasured round first, so that the measured ones find warm workers: HTTP connections
    // open, code compiled, each worker's Redis connections made.
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
    const rounds = [noLock, cold, stale];
    if (values.json) {
      console.log(
        JSON.stringify({ workers, requests, buildMs, rounds, hitsSlowestMs: hits.slowestMs }),
      );
    } else {
      console.log(`nestjs-buffer-lock demo`);
      console.log(`  Redis: ${note}`);
      console.log(
        `  ${workers} workers (node:cluster), ${requests} concurrent requests for one report per row, ` +
          `${buildMs} ms per build\n  (the stale key: past its ${TTL_S} s ttl, within its ${GRACE_S} s grace)\n`,
      );
      print(rounds, requests);
      console.log(
        `\n  For scale, ${requests} fresh hits here: slowest caller ${Math.round(hits.slowestMs)} ms ` +
          `(builds: ${hits.builds}).`,
      );
    }
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
    await throwaway?.stop();
  }
}

if (cluster.isPrimary) {
  await primary();
} else {
  await bootstrap(Number(process.env.PORT));
}
