import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { Build, Call, Command, Reply } from '../multi-process/flight.protocol.js';
import { Worker } from '../multi-process/flight.workers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/** The repository root. */
const root = new URL('../..', import.meta.url).pathname;
/** Where the fault tests' copy of the workers is compiled (apart from test/multi-process's own). */
const OUT_DIR = '.build/faults';
/** The compiled worker, relative to the root. */
const FAULT_WORKER = `${OUT_DIR}/test/multi-process/flight.worker.js`;

export type { Build, Call };
export type FaultWorker = Worker<Command, Reply>;

/** Newest modification time of any file under `dir` (or of `dir` itself, a file). */
function newest(path: string): number {
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let max = 0;
  for (const name of readdirSync(path)) max = Math.max(max, newest(join(path, name)));
  return max;
}

/**
 * Compiles the workers (tsc: child processes need runnable JavaScript) into a directory of their
 * own, once for all fault test files: under a directory lock, and only when a source is newer than
 * the last build. A test file never runs a worker that another file is rewriting.
 */
export async function compileWorkers(): Promise<void> {
  const lock = join(root, `${OUT_DIR}.lock`);
  const stamp = join(root, OUT_DIR, '.built');
  mkdirSync(join(root, '.build'), { recursive: true });
  for (const deadline = Date.now() + 120_000; ;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`${lock} is held for 2 minutes`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  try {
    const sources = Math.max(
      newest(join(root, 'lib')),
      newest(join(root, 'test/multi-process')),
      newest(join(root, 'test/support/redis-server.ts')),
    );
    let built = 0;
    try {
      built = statSync(stamp).mtimeMs;
    } catch {
      // never built
    }
    if (built > sources) return;
    const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
    const run = spawnSync(
      process.execPath,
      [tsc, '-p', 'test/multi-process/tsconfig.json', '--outDir', OUT_DIR],
      { cwd: root, encoding: 'utf8' },
    );
    if (run.status !== 0) throw new Error(`tsc failed:\n${run.stdout}`);
    writeFileSync(stamp, '');
  } finally {
    rmdirSync(lock);
  }
}

/** Starts `count` workers on `env` (see flight.worker.ts for the variables). */
export function startWorkers(count: number, env: Record<string, string>): Promise<FaultWorker[]> {
  return Promise.all(
    Array.from({ length: count }, () => Worker.start<Command, Reply>(env, FAULT_WORKER)),
  );
}

/** A Redis server and the workers on it, for the tests of one file (set before they run). */
export interface FaultRig {
  readonly server: RedisServer;
  readonly workers: FaultWorker[];
}

/**
 * Before the file's tests: compiles the workers, starts a Redis server and the workers `start`
 * makes on it. After them: stops the workers, then `close` (what `start` opened besides), then the
 * server, resumed first in case a test left it paused (SIGSTOP).
 */
export function faultRig(
  start: (server: RedisServer) => Promise<FaultWorker[]>,
  close?: () => Promise<void>,
): FaultRig {
  let server: RedisServer;
  let workers: FaultWorker[] = [];
  beforeAll(async () => {
    await compileWorkers();
    server = await startRedis();
    workers = await start(server);
  }, 120_000);
  afterAll(async () => {
    server.resume();
    await Promise.all(workers.map((w) => w.stop()));
    await close?.();
    await server.stop();
  });
  return {
    get server() {
      return server;
    },
    get workers() {
      return workers;
    },
  };
}

/** A holder's or waiters' lock settings, in seconds. */
export interface LockSettings {
  readonly ttl: number;
  readonly lockTimeout: number;
}

/**
 * One holder and two waiters on the fail-fast client, reporting their builds and lock events
 * (REPORT=1), the holder first.
 */
export async function startHolderAndWaiters(
  server: RedisServer,
  ns: string,
  holder: LockSettings,
  waiters: LockSettings,
): Promise<FaultWorker[]> {
  const env = { REDIS_URL: server.url, NS: ns, CLIENT: 'fail-fast', REPORT: '1' };
  const settings = ({ ttl, lockTimeout }: LockSettings): Record<string, string> => ({
    TTL: String(ttl),
    LOCK_TIMEOUT: String(lockTimeout),
  });
  const started = await Promise.all([
    startWorkers(1, { ...env, ...settings(holder) }),
    startWorkers(2, { ...env, ...settings(waiters) }),
  ]);
  return started.flat();
}

/** The load tests' client commandTimeout, in ms. */
export const COMMAND_TIMEOUT = 400;
/** How long a fault under load lasts. */
export const FAULT_MS = 1500;
/** Load before the fault, and after it. */
const BEFORE_MS = 300;
const AFTER_MS = 1200;

/** 3 workers for a load on the fail-fast client with COMMAND_TIMEOUT, through `url`. */
export function startLoadWorkers(url: string, ns: string): Promise<FaultWorker[]> {
  return startWorkers(3, {
    REDIS_URL: url,
    NS: ns,
    TTL: '2',
    LOCK_TIMEOUT: '1',
    CLIENT: 'fail-fast',
    COMMAND_TIMEOUT: String(COMMAND_TIMEOUT),
  });
}

/**
 * Runs 4 loops of calls a worker (keys of its own, under `${prefix}${i}:`) from BEFORE_MS before
 * a fault of FAULT_MS (from `fault.begin()` to `fault.end()`) to AFTER_MS after it, and prints
 * the figures as `name`'s.
 */
export async function loadAcrossFault(
  workers: readonly FaultWorker[],
  prefix: string,
  name: string,
  fault: { begin(): void; end(): void },
): Promise<LoadFigures> {
  const loads = workers.map((worker, i) =>
    calls(worker, {
      cmd: 'load',
      prefix: `${prefix}${i}:`,
      loops: 4,
      durationMs: BEFORE_MS + FAULT_MS + AFTER_MS,
      gapMs: 20,
    }),
  );
  await sleep(BEFORE_MS);
  const from = Date.now();
  fault.begin();
  await sleep(FAULT_MS);
  fault.end();
  const to = Date.now();
  const seen = loadFigures((await Promise.all(loads)).flat(), from, to);
  figures(`${name} ${FAULT_MS} ms (commandTimeout ${COMMAND_TIMEOUT} ms)`, { ...seen });
  return seen;
}

/** SIGKILLs a worker and waits for it to exit. */
export async function killWorker(worker: FaultWorker): Promise<number> {
  const child = worker.process;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  const at = Date.now();
  await exited;
  return at;
}

/** Asks for `calls` or `load` and resolves to the calls. */
export async function calls(
  worker: FaultWorker,
  command: Extract<Command, { cmd: 'calls' | 'load' }> extends infer C
    ? C extends unknown
      ? Omit<C, 'id'>
      : never
    : never,
): Promise<readonly Call[]> {
  const reply = await worker.ask<Extract<Reply, { calls: unknown }>>(command);
  return reply.calls;
}

/** The builds the workers reported (REPORT=1), in the order they ended. */
export function builds(workers: readonly FaultWorker[]): Build[] {
  return workers
    .flatMap((w) => w.events.flatMap((e) => (e.event === 'built' ? [e.build] : [])))
    .toSorted((a, b) => a.finishedAt - b.finishedAt);
}

/** Pairs of runs whose time spans overlap (each span `[start, end)`). */
export function overlapping<T extends { startedAt: number; finishedAt: number }>(
  spans: readonly T[],
): [T, T][] {
  const pairs: [T, T][] = [];
  spans.forEach((a, i) => {
    for (const b of spans.slice(i + 1)) {
      if (a.startedAt < b.finishedAt && b.startedAt < a.finishedAt) pairs.push([a, b]);
    }
  });
  return pairs;
}

/** Prints one line of measured figures, so that a run's output shows the bounds it observed. */
export function figures(fault: string, measured: Record<string, number | string>): void {
  const text = Object.entries(measured)
    .map(([name, value]) => `${name}=${value}`)
    .join(' ');
  console.log(`[fault] ${fault}: ${text}`);
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** What a load saw around a fault that lasted from `from` to `to` (ms timestamps). */
export interface LoadFigures {
  readonly calls: number;
  readonly errors: number;
  /** Calls made while the fault lasted. */
  readonly during: number;
  /** The longest call, made at any time. */
  readonly maxLatencyMs: number;
  /** From the end of the fault to the start of the first run that held the lock again. */
  readonly relockMs: number;
  /** The longest call: when it was made (from the fault's start), whether it held the lock, and how long it took to start the run. */
  readonly slowest: string;
}

/** Sums up the calls of a load around a fault from `from` to `to`. */
export function loadFigures(all: readonly Call[], from: number, to: number): LoadFigures {
  const relocked = all.flatMap((c) =>
    c.value?.fence !== undefined && c.value.startedAt >= to ? [c.value.startedAt] : [],
  );
  const slowest = all.reduce((a, b) =>
    b.resolvedAt - b.calledAt > a.resolvedAt - a.calledAt ? b : a,
  );
  return {
    slowest: `${slowest.calledAt - from}ms:${slowest.value?.fence === undefined ? 'unlocked' : 'locked'}:admitted+${slowest.value ? slowest.value.startedAt - slowest.calledAt : '-'}ms`,
    calls: all.length,
    errors: all.filter((c) => c.error !== undefined).length,
    during: all.filter((c) => c.calledAt >= from && c.calledAt < to).length,
    maxLatencyMs: Math.max(...all.map((c) => c.resolvedAt - c.calledAt)),
    relockMs: Math.min(...relocked) - to,
  };
}
