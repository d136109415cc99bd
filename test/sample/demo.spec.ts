import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, startRedis } from '../support/redis-server.js';

/**
 * `npm run demo`, compiled (tsc -p sample/tsconfig.json): on a machine without Redis (no REDIS_URL,
 * a PATH without redis-server), with a REDIS_URL that nothing answers at, and with no REDIS_URL
 * beside a Redis it was not told of, which it leaves alone.
 */

const root = new URL('../..', import.meta.url).pathname;
const REQUESTS = 50;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

interface Round {
  label: string;
  builds: number;
  answered: number;
}

async function demo(args: string[], env: NodeJS.ProcessEnv): Promise<Ran> {
  const child = spawn(process.execPath, ['.build/sample/demo.js', ...args], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

let emptyBin: string;
let withoutRedis: NodeJS.ProcessEnv;

beforeAll(async () => {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', 'sample/tsconfig.json'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.status !== 0) throw new Error(`tsc -p sample/tsconfig.json failed:\n${build.stdout}`);
  emptyBin = mkdtempSync(join(tmpdir(), 'demo-path-'));
  const { REDIS_URL: _unset, ...env } = process.env;
  withoutRedis = { ...env, PATH: emptyBin };
}, 120_000);

afterAll(() => {
  if (emptyBin) rmSync(emptyBin, { recursive: true, force: true });
});

describe('npm run demo without Redis and without redis-server', () => {
  // Long builds, so that every one of the requests misses before the first build is stored.
  const args = ['--requests', String(REQUESTS), '--build-ms', '1000'];
  let json: Ran;
  let text: Ran;

  beforeAll(async () => {
    [json, text] = await Promise.all([
      demo([...args, '--json'], withoutRedis),
      demo(args, withoutRedis),
    ]);
  }, 60_000);

  it('runs the rounds in one process: no lock builds once per request, @Cached once', () => {
    expect(json.stderr).toBe('');
    expect(json.code).toBe(0);
    const result = JSON.parse(json.stdout) as {
      mode: string;
      requests: number;
      rounds: Round[];
      crossProcess: string;
    };
    expect(result.mode).toBe('one-process');
    expect(result.requests).toBe(REQUESTS);
    const byLabel = Object.fromEntries(result.rounds.map((round) => [round.label, round]));
    expect(byLabel['no lock']).toMatchObject({ builds: REQUESTS, answered: REQUESTS });
    expect(byLabel['@Cached, cold key']).toMatchObject({ builds: 1, answered: REQUESTS });
    expect(byLabel['@Cached, stale key']).toMatchObject({ builds: 1, answered: REQUESTS });
    expect(result.crossProcess).toContain('apt-get install redis-server');
    expect(result.crossProcess).toContain('brew install redis');
    expect(result.crossProcess).toContain('REDIS_URL');
  });

  it('prints the table, that it ran in one process, and how to see it across processes', () => {
    expect(text.stderr).toBe('');
    expect(text.code).toBe(0);
    const row = (label: string) =>
      new RegExp(`^ +${label} +(\\d+) +(\\d+)/${REQUESTS} +\\d+ ms$`, 'm').exec(text.stdout);
    expect(row('no lock')?.slice(1, 3)).toEqual([String(REQUESTS), String(REQUESTS)]);
    expect(row('@Cached, cold key')?.slice(1, 3)).toEqual(['1', String(REQUESTS)]);
    expect(text.stdout).toContain('Redis: none (REDIS_URL unset');
    expect(text.stdout).toContain('This ran in one process');
    expect(text.stdout).toContain('the in-memory backend coordinates this process only');
    expect(text.stdout).toContain('install redis-server');
    expect(text.stdout).toContain('or set REDIS_URL');
    expect(text.stdout).not.toMatch(/tests/i);
  });
});

describe('npm run demo with REDIS_URL unset and redis-server on PATH', () => {
  it('runs its workers on a throwaway redis-server of its own, never on a Redis nobody named', async () => {
    const unnamed = await startRedis();
    const admin = unnamed.client();
    try {
      const { REDIS_URL: _unset, ...env } = process.env;
      // Where earlier versions looked first when REDIS_URL was unset.
      const ran = await demo(['--requests', '20', '--build-ms', '200', '--json'], {
        ...env,
        DEMO_DEFAULT_REDIS_URL: unnamed.url,
      });
      expect([ran.code, ran.stderr]).toEqual([0, '']);
      const result = JSON.parse(ran.stdout) as { mode: string; redis: string };
      expect(result.mode).toBe('cluster');
      expect(result.redis).toMatch(/^redis:\/\/127\.0\.0\.1:\d+ \(throwaway redis-server\)$/);
      expect(result.redis).not.toContain(unnamed.url);
      expect(await admin.dbsize()).toBe(0);
    } finally {
      admin.disconnect();
      await unnamed.stop();
    }
  }, 60_000);
});

describe('npm run demo with a REDIS_URL that nothing answers at', () => {
  it('exits 1 with one line on what to do: no stack trace, no credentials', async () => {
    const port = await freePort();
    const ran = await demo([], {
      ...withoutRedis,
      REDIS_URL: `redis://demo-user:demo-secret@127.0.0.1:${port}`,
    });
    expect(ran.code).toBe(1);
    expect(ran.stdout).toBe('');
    expect(ran.stderr).toBe(
      `demo: no Redis answers at redis://127.0.0.1:${port} (REDIS_URL). ` +
        'Start it, or unset REDIS_URL to run the one-process demo.\n',
    );
    expect(ran.stderr).not.toMatch(/^\s+at /m);
    expect(ran.stderr).not.toContain('demo-secret');
  });
});
