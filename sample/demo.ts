/**
 * The stampede demo: several workers (node:cluster) share one Redis; many concurrent requests ask
 * for one cold report. With @SingleFlight one worker builds it and the rest wait for it; without a
 * lock every request that misses the cache builds it again.
 *
 *   npm run demo                      # 3 workers, 300 requests, 500 ms builds
 *   npm run demo -- --workers 4 --requests 1000 --json
 *
 * Uses REDIS_URL (default redis://127.0.0.1:6379). If nothing answers there and redis-server is on
 * PATH, it starts a throwaway server on a free port and stops it at the end.
 */
import cluster, { type Worker } from 'node:cluster';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { startRedis, type RedisServer } from '../test/support/redis-server.js';
import { redactUrl } from './config.js';
import { bootstrap } from './main.js';
import type { Report } from './reports/report-cache.js';

const DEFAULT_URL = 'redis://127.0.0.1:6379';

interface Round {
  label: string;
  builds: number;
  answered: number;
  sameReport: boolean;
  seconds: number;
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

async function round(label: string, url: string, requests: number, id: string, path: string) {
  const started = performance.now();
  const replies = await Promise.all(
    Array.from({ length: requests }, async () => {
      const reply = await fetch(`${url}/reports/${id}${path}`);
      return reply.ok ? ((await reply.json()) as Report) : undefined;
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const builds = ((await (await fetch(`${url}/reports/${id}/builds`)).json()) as { builds: number })
    .builds;
  const answered = replies.filter((reply) => reply !== undefined);
  const sameReport = new Set(answered.map((r) => `${r!.builtBy}@${r!.builtAt}`)).size === 1;
  return { label, builds, answered: answered.length, sameReport, seconds } satisfies Round;
}

function print(rounds: Round[], requests: number): void {
  const rows = [
    ['', 'builds', 'answered', 'one report', 'time'],
    ...rounds.map((r) => [
      r.label,
      String(r.builds),
      `${r.answered}/${requests}`,
      r.sameReport ? 'yes' : 'no',
      `${r.seconds.toFixed(2)} s`,
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
  const env = { REDIS_URL: redisUrl, PORT: '0', BUILD_MS: values['build-ms'], QUIET: '1' };
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
    const run = `${Date.now().toString(36)}-${process.pid}`; // a cold key for every run
    // One unmeasured round first, so that both measured rounds find warm workers: HTTP
    // connections open, code compiled, each worker's Redis connections made.
    await round('warm-up', base, requests, `warm-up-${run}`, '');
    const rounds = [
      await round('with @SingleFlight', base, requests, `locked-${run}`, ''),
      await round('without a lock', base, requests, `unlocked-${run}`, '/unlocked'),
    ];
    if (values.json) {
      console.log(JSON.stringify({ workers, requests, rounds }));
    } else {
      console.log(`nestjs-buffer-lock demo`);
      console.log(`  Redis: ${note}`);
      console.log(
        `  ${workers} workers (node:cluster), ${requests} concurrent requests for one cold report; ` +
          `one build takes ${values['build-ms']} ms\n`,
      );
      print(rounds, requests);
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
