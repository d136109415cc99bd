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
const workers: { process: ChildProcess; port: number }[] = [];

async function answering(port: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/reports/probe/builds`)).ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`worker on port ${port} did not start`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', 'sample/tsconfig.json'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.status !== 0) throw new Error(`tsc -p sample/tsconfig.json failed:\n${build.stdout}`);
  server = await startRedis();
  const base = 30_000 + Math.floor(Math.random() * 20_000);
  for (let i = 0; i < WORKERS; i++) {
    const port = base + i;
    const child = spawn(process.execPath, ['.build/sample/main.js'], {
      cwd: root,
      env: {
        ...process.env,
        REDIS_URL: server.url,
        PORT: String(port),
        BUILD_MS: String(BUILD_MS),
        QUIET: '1',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    workers.push({ process: child, port });
  }
  await Promise.all(workers.map((worker) => answering(worker.port)));
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
    Array.from({ length: count }, (_, i) =>
      fetch(`http://127.0.0.1:${workers[i % WORKERS]!.port}${path}`),
    ),
  );
}

const buildsOf = async (id: string): Promise<number> =>
  (
    (await (await fetch(`http://127.0.0.1:${workers[0]!.port}/reports/${id}/builds`)).json()) as {
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
