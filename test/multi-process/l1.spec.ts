import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCache, RedisLockService } from '../../lib/index.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import type { CacheCommand, CacheReply } from './cache.protocol.js';
import { compileWorkers, Worker } from './flight.workers.js';

/**
 * The in-process tier across 3 real worker processes (Nest application contexts with
 * BufferLockModule.forRoot({ redis: url, l1 })) on one redis-server: a write or delete in one
 * drops the copies of the others, and a worker whose subscription is killed drops its own. Each
 * worker's `maxAge` is a minute, so that only an invalidation can explain a new value within a test.
 */

const WORKER = '.build/multi-process/test/multi-process/cache.worker.js';
const NS = 'mp:l1:';

type CacheWorker = Worker<CacheCommand, CacheReply>;
type Read = Extract<CacheReply, { value: unknown }>;
type Done = Extract<CacheReply, { done: true }>;

let server: RedisServer;
let admin: Redis;
let workers: CacheWorker[] = [];
/** A cache of this process without l1: its writes announce nothing, so no copy is dropped by them. */
let silent: BufferCache;

beforeAll(async () => {
  compileWorkers();
  server = await startRedis();
  admin = server.client();
  const env = { REDIS_URL: server.url, NS, L1: JSON.stringify({ maxAge: 60 }) };
  workers = await Promise.all(
    [0, 1, 2].map(() => Worker.start<CacheCommand, CacheReply>(env, WORKER)),
  );
  const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
  silent = new BufferCache({ lock, options: { logger: new MemoryLogger() } });
}, 120_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop()));
  await server?.stop();
});

const read = (w: CacheWorker, key: string): Promise<unknown> =>
  w.ask<Read>({ cmd: 'read', key }).then((reply) => reply.value);
const write = (w: CacheWorker, key: string, value: unknown): Promise<Done> =>
  w.ask<Done>({ cmd: 'write', key, value });

let n = 0;
/**
 * A key every worker holds a copy of, as `'v1'`, while the store has `'unannounced'`: each worker
 * read `'v1'`, then kept serving it after a write that announced nothing.
 */
async function heldEverywhere(): Promise<string> {
  let key = '';
  await until(async () => {
    key = `l1:mp:${++n}`;
    await silent.set(key, 'v1');
    await Promise.all(workers.map((w) => read(w, key)));
    await silent.set(key, 'unannounced');
    const seen = await Promise.all(workers.map((w) => read(w, key)));
    return seen.every((value) => value === 'v1');
  });
  return key;
}

describe('l1 across 3 worker processes', () => {
  it('a set() in one worker: the two others serve the new value', async () => {
    const key = await heldEverywhere();
    await write(workers[0]!, key, 'v2');
    for (const w of workers.slice(1)) await until(async () => (await read(w, key)) === 'v2');
    expect(await read(workers[0]!, key)).toBe('v2');
  });

  it('a delete() in one worker: the two others find no entry', async () => {
    const key = await heldEverywhere();
    await write(workers[0]!, key, null);
    for (const w of workers) await until(async () => (await read(w, key)) === null);
  });

  it('a deleteByTag in one worker: every worker’s next read of a tagged entry builds it again', async () => {
    const key = `l1:mp:tagged:${++n}`;
    const tags = [`tag:${n}`];
    const tagged = (w: CacheWorker): Promise<unknown> =>
      w.ask<Read>({ cmd: 'tagged', key, tags }).then((reply) => reply.value);
    const first = await tagged(workers[0]!);
    for (const w of workers) expect(await tagged(w)).toBe(first);
    await workers[1]!.ask<Done>({ cmd: 'untag', tags });
    // Each worker hears of it on its own subscription, a little after the call returned.
    for (const w of workers) await until(async () => (await tagged(w)) !== first);
    // Built once for all of them.
    const rebuilt = await Promise.all(workers.map(tagged));
    expect(new Set(rebuilt).size).toBe(1);
  });

  it('the subscribers killed: within 1 s every worker drops its copies, then keeps them again once subscribed', async () => {
    const key = await heldEverywhere();
    const killedAt = Date.now();
    const killed = Number(await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub'));
    expect(killed).toBe(workers.length);
    for (const w of workers) await until(async () => (await read(w, key)) === 'unannounced');
    expect(Date.now() - killedAt).toBeLessThan(1000);
    await heldEverywhere();
  });
});
