import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Report } from '../../sample/reports/report-cache.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Three real worker processes (the sample app, compiled with tsc: child processes need runnable
 * JavaScript) share the test's Redis and its cache. 300 concurrent requests for one cold report
 * must give exactly one build.
 */

const root = new URL('../..', import.meta.url).pathname;
const WORKERS = 3;
const BUILD_MS = 1000;

let server: RedisServer;
const workers: { process: ChildProcess; url: string }[] = [];

/** Starts one worker on a free port (PORT=0); resolves once it reports where it listens. */
async function startWorker(redisUrl: string): Promise<{ process: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ['.build/sample/main.js'], {
    cwd: root,
    env: { ...process.env, REDIS_URL: redisUrl, PORT: '0', BUILD_MS: String(BUILD_MS), QUIET: '1' },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const listening = once(child, 'message') as Promise<[{ listening: string }]>;
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`worker exited with ${String(code)} before listening`);
  });
  exited.catch(() => {}); // an exit only matters while waiting; later ones are the shutdown
  const [message] = await Promise.race([listening, exited]);
  return { process: child, url: message.listening };
}

beforeAll(async () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', 'sample/tsconfig.json'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.status !== 0) throw new Error(`tsc -p sample/tsconfig.json failed:\n${build.stdout}`);
  server = await startRedis();
  for (let i = 0; i < WORKERS; i++) workers.push(await startWorker(server.url));
}, 180_000);

afterAll(async () => {
  await Promise.all(
    workers.map(async ({ process: child }) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGTERM');
      await exited;
    }),
  );
  await server?.stop();
});

/** `count` concurrent GETs of `path`, spread round-robin over the workers. */
function stampede(count: number, path: string): Promise<Response[]> {
  return Promise.all(
    Array.from({ length: count }, (_, i) => fetch(`${workers[i % WORKERS]!.url}${path}`)),
  );
}

const buildsOf = async (id: string): Promise<number> =>
  (
    (await (await fetch(`${workers[0]!.url}/reports/${id}/builds`)).json()) as {
      builds: number;
    }
  ).builds;

describe('a stampede across 3 worker processes on one cold key', () => {
  it('builds exactly once with @SingleFlight; every request gets that one report', async () => {
    const replies = await stampede(300, '/reports/cold');
    expect(replies.map((reply) => reply.status)).toEqual(Array(300).fill(200));
    const reports = (await Promise.all(replies.map((reply) => reply.json()))) as Report[];
    expect(await buildsOf('cold')).toBe(1);
    const distinct = new Set(reports.map((report) => `${report.builtBy}@${report.builtAt}`));
    expect(distinct.size).toBe(1);
    const pids = workers.map((worker) => worker.process.pid);
    expect(pids).toContain(reports[0]!.builtBy);
  }, 120_000);

  it('builds more than once without the lock (the test can tell the difference)', async () => {
    const replies = await stampede(30, '/reports/cold-unlocked/unlocked');
    expect(replies.every((reply) => reply.status === 200)).toBe(true);
    expect(await buildsOf('cold-unlocked')).toBeGreaterThan(1);
  }, 60_000);
});
