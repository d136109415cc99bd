import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { monitor } from '../support/monitor.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import type { CacheCommand, CacheReply } from './cache.protocol.js';
import { compileWorkers, Worker } from './flight.workers.js';

/**
 * BufferCache.getOrSet across 3 real worker processes (Nest application contexts with
 * BufferLockModule.forRoot({ redis: url }), compiled with tsc: child processes need runnable
 * JavaScript) on one redis-server: a cold key is built once in the fleet, a stale key is served
 * at once while one worker refreshes it, and a fresh hit costs one read and no lock command.
 */

const WORKER = '.build/multi-process/test/multi-process/cache.worker.js';
const WORKERS = 3;
const CALLERS = 100;
const BUILD_MS = 200;

type CacheWorker = Worker<CacheCommand, CacheReply>;
type Answers = Extract<CacheReply, { results: unknown }>;
type Settled = Extract<CacheReply, { runs: unknown }>;

let server: RedisServer;
let admin: Redis;
let workers: CacheWorker[] = [];

beforeAll(async () => {
  compileWorkers();
  server = await startRedis();
  admin = server.client();
  workers = await Promise.all(
    Array.from({ length: WORKERS }, () =>
      Worker.start<CacheCommand, CacheReply>({ REDIS_URL: server.url }, WORKER),
    ),
  );
}, 120_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await server?.stop();
});

/** Every worker makes `CALLERS` concurrent getOrSet calls of `key`; all answers, in one list. */
async function stampede(
  key: string,
  ttl: number,
  grace: number,
  padBytes?: number,
): Promise<Answers['results']> {
  const replies = await Promise.all(
    workers.map((w) =>
      w.ask<Answers>({
        cmd: 'get',
        key,
        callers: CALLERS,
        buildMs: BUILD_MS,
        ttl,
        grace,
        padBytes,
      }),
    ),
  );
  return replies.flatMap((reply) => reply.results);
}

/** What every worker did, once nothing is in flight anywhere. */
const settle = (): Promise<Settled[]> =>
  Promise.all(workers.map((w) => w.ask<Settled>({ cmd: 'settle' })));

const runsOf = (settled: readonly Settled[], key: string) =>
  settled.flatMap((s) => s.runs.filter((run) => run.key === key));

/** Calls of every command so far (INFO commandstats). */
async function commandCalls(): Promise<Map<string, number>> {
  const calls = new Map<string, number>();
  for (const [, name, count] of String(await admin.info('commandstats')).matchAll(
    /cmdstat_([^:]+):calls=(\d+)/g,
  )) {
    calls.set(name!, Number(count));
  }
  return calls;
}

function delta(after: Map<string, number>, before: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, count] of after) {
    const d = count - (before.get(name) ?? 0);
    if (d > 0 && !['info', 'ping'].includes(name)) out[name] = d;
  }
  return out;
}

/**
 * Runs a cold stampede of `key` under MONITOR; counts the store reads (the GET a read script
 * runs) of the entry after the release's wake-up, and tells what that wake-up carried.
 */
async function readsAfterWakeUp(
  key: string,
  padBytes?: number,
): Promise<{ reads: number; carried: boolean; results: Answers['results'] }> {
  const seen: string[][] = [];
  const stop = await monitor(admin, ({ source, args }) => void seen.push([source, ...args]));
  let results: Answers['results'];
  try {
    results = await stampede(key, 60, 0, padBytes);
    await settle();
    await admin.ping();
    await new Promise((r) => setTimeout(r, 100));
  } finally {
    stop();
  }
  const wake = seen.findIndex(([source, name]) => source === 'lua' && name === 'SPUBLISH');
  expect(wake).toBeGreaterThan(-1);
  const [, , lockKey, text] = seen[wake]!;
  const reads = seen
    .slice(wake + 1)
    .filter(([source, name, at]) => source === 'lua' && name === 'GET' && at!.includes(lockKey!));
  return { reads: reads.length, carried: text!.startsWith('=e'), results };
}

describe(`BufferCache.getOrSet across ${WORKERS} worker processes × ${CALLERS} callers`, () => {
  it('a cold key: exactly one build in the fleet, every caller gets its value', async () => {
    const results = await stampede('cold', 60, 0);
    const runs = runsOf(await settle(), 'cold');
    expect(runs).toHaveLength(1);
    expect(results).toHaveLength(WORKERS * CALLERS);
    const [run] = runs;
    for (const { value, answeredAt } of results) {
      expect(value).toEqual({
        pid: run!.pid,
        startedAt: run!.startedAt,
        finishedAt: run!.finishedAt,
      });
      expect(answeredAt).toBeGreaterThanOrEqual(run!.finishedAt!);
    }
  }, 60_000);

  it('a cold key: the waiting workers answer from the wake-up, which carries the entry: no read after it', async () => {
    const { reads, carried, results } = await readsAfterWakeUp('carried');
    const [run] = runsOf(await settle(), 'carried');
    expect(carried).toBe(true);
    expect(reads).toBe(0);
    expect(results).toHaveLength(WORKERS * CALLERS);
    expect(new Set(results.map((r) => r.value.startedAt))).toEqual(new Set([run!.startedAt]));
  }, 60_000);

  it('a cold key whose entry is over 64 KiB: the wake-up says "read it", one read per waiting worker', async () => {
    const { reads, carried, results } = await readsAfterWakeUp('too-big', 70 * 1024);
    expect(runsOf(await settle(), 'too-big')).toHaveLength(1);
    expect(carried).toBe(false);
    expect(reads).toBe(WORKERS - 1);
    expect(results).toHaveLength(WORKERS * CALLERS);
    expect(results.every((r) => r.value.padBytes === 70 * 1024)).toBe(true);
  }, 60_000);

  it('a cold key whose wake-up the waiting workers lose: each reads the entry once, and the fleet still builds once', async () => {
    // Redis drops a subscriber connection whose pending output passes the pubsub limit instead of
    // delivering to it: a 32 KiB entry riding the wake-up passes 1 KiB, so no waiter hears it.
    const [, limits] = (await admin.config('GET', 'client-output-buffer-limit')) as string[];
    await admin.config('SET', 'client-output-buffer-limit', 'pubsub 1024 1024 0');
    try {
      const { reads, carried, results } = await readsAfterWakeUp('lost', 32 * 1024);
      const runs = runsOf(await settle(), 'lost');
      // The wake-up carried the entry, yet each waiting worker read it: none heard the message.
      expect(carried).toBe(true);
      expect(reads).toBe(WORKERS - 1);
      expect(runs).toHaveLength(1);
      expect(results).toHaveLength(WORKERS * CALLERS);
      expect(new Set(results.map((r) => r.value.startedAt))).toEqual(new Set([runs[0]!.startedAt]));
    } finally {
      await admin.config('SET', 'client-output-buffer-limit', limits!);
    }
  }, 60_000);

  it('a stale key: exactly one refresh in the fleet, every caller answered with the stale value before it finished', async () => {
    // Built once with a short ttl and a long grace, then left to go stale.
    const [first] = await stampede('stale', 0.3, 60);
    const warm = runsOf(await settle(), 'stale');
    expect(warm).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 400));

    const results = await stampede('stale', 0.3, 60);
    const settled = await settle();
    const runs = runsOf(settled, 'stale');
    expect(runs).toHaveLength(2); // the first build and exactly one refresh
    const refresh = runs.find((run) => run.startedAt !== warm[0]!.startedAt)!;
    const refreshedBy = settled.find((s) => s.runs.includes(refresh))!;
    const builtEvents = refreshedBy.built.filter((b) => b.key === 'stale');
    const refreshBuilt = builtEvents[builtEvents.length - 1]!.at;
    expect(refreshBuilt).toBeGreaterThanOrEqual(refresh.finishedAt!);

    expect(results).toHaveLength(WORKERS * CALLERS);
    for (const { value, answeredAt } of results) {
      expect(value).toEqual(first!.value); // the stale value: nobody waited for the refresh
      expect(answeredAt).toBeLessThan(refresh.finishedAt!);
      expect(answeredAt).toBeLessThan(refreshBuilt);
    }
    // And the refresh took: the next call is a fresh hit on the new value.
    const [after] = (
      await workers[1]!.ask<Answers>({
        cmd: 'get',
        key: 'stale',
        callers: 1,
        buildMs: BUILD_MS,
        ttl: 60,
        grace: 60,
      })
    ).results;
    expect(after!.value.startedAt).toBe(refresh.startedAt);
  }, 60_000);

  it('fresh hits: at most one GET script per call and no lock command on the server', async () => {
    await stampede('hot', 60, 0);
    await settle();
    const before = await commandCalls();
    const results = await stampede('hot', 60, 0);
    const commands = delta(await commandCalls(), before);
    expect(results).toHaveLength(WORKERS * CALLERS);
    // The one read is EVALSHA of GET (the GET inside the script is counted too); overlapping
    // lookups of one key in a process share it. No SET NX, no release (DEL), no wake-up
    // (SPUBLISH), no subscription.
    expect(Object.keys(commands).toSorted()).toEqual(['evalsha', 'get']);
    expect(commands.evalsha).toBe(commands.get);
    expect(commands.evalsha).toBeGreaterThanOrEqual(WORKERS);
    expect(commands.evalsha).toBeLessThanOrEqual(WORKERS * CALLERS);
    expect(runsOf(await settle(), 'hot')).toHaveLength(1);
  }, 60_000);

  // Each worker reads every 3 ms. With a build of 50 ms and β = 20, δ·β ≈ 1 s: once less than
  // ttl/2 = 500 ms is left each read starts the refresh with a chance above 0.6, so a window in
  // which none of the ~350 reads between 500 and 150 ms left does has a chance below 0.4^50.
  type Hot = Extract<CacheReply, { misses: unknown }>;
  const hot = (key: string, beta: number): Promise<Hot[]> =>
    Promise.all(
      workers.map((w) =>
        w.ask<Hot>({ cmd: 'hot', key, buildMs: 50, ttl: 1, beta, forMs: 3200, everyMs: 3 }),
      ),
    );

  it('earlyRefresh on a hot key with grace 0: no worker meets an expiry, one build at a time in the fleet', async () => {
    await stampede('early', 1, 0);
    const replies = await hot('early', 20);
    const runs = runsOf(await settle(), 'early').toSorted((a, b) => a.startedAt - b.startedAt);
    const reads = replies.map((reply) => reply.reads);
    console.log('early refresh across workers', { reads, builds: runs.length });
    expect(replies.map((reply) => reply.misses)).toEqual(Array(WORKERS).fill(0));
    expect(replies.every((reply) => reply.reads > 100)).toBe(true);
    for (let i = 1; i < runs.length; i++) {
      expect(runs[i]!.startedAt).toBeGreaterThanOrEqual(runs[i - 1]!.finishedAt!);
    }
    // The first build, then at most one a half ttl over 3.2 s.
    expect(runs.length).toBeGreaterThanOrEqual(4);
    expect(runs.length).toBeLessThanOrEqual(1 + 7);
  }, 60_000);

  it('without earlyRefresh the same readers meet the expiries (the check above can fail)', async () => {
    await stampede('late', 1, 0);
    const replies = await hot('late', 0);
    const builds = runsOf(await settle(), 'late').length;
    console.log('no early refresh', { misses: replies.map((reply) => reply.misses), builds });
    expect(replies.reduce((sum, reply) => sum + reply.misses, 0)).toBeGreaterThan(0);
  }, 60_000);
});
