import { Injectable, type INestApplicationContext } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  LockError,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { deferred, MemoryLogger, until } from '../support/nest-helpers.js';

/**
 * Shutdown drains: no new build, builds in flight finish within `shutdownTimeout`, every lock
 * this process holds is released, and only then do connections close. Real redis-server; the
 * locks left behind are looked for with a client of the test's own.
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const lockKeys = (ns: string): Promise<string[]> => admin.keys(`${ns}*`);
const silent = { log() {}, warn() {}, error() {} };

/** A second worker on the same Redis, with the module's default lockTimeout (10 s). */
function otherWorker(ns: string): SingleFlightEngine {
  const lock = new RedisLockService({ redis: server.client(), namespace: ns });
  return new SingleFlightEngine({ lock, options: { logger: silent } });
}

const gate = deferred();
const started: string[] = [];
const ran: string[] = [];

@Injectable()
class Reports {
  @SingleFlight((id: string) => `report:${id}`)
  async build(id: string): Promise<string> {
    ran.push(id);
    started.push(id);
    await gate.promise;
    return `report ${id}`;
  }
}

async function appOn(ns: string, logger: MemoryLogger): Promise<INestApplicationContext> {
  const ref = await Test.createTestingModule({
    imports: [
      // A ttl past any test's timeout: a lock left behind is still there when it is looked for.
      BufferLockModule.forRoot({ redis: server.url, namespace: ns, ttl: 120, logger }),
    ],
    providers: [Reports],
  }).compile();
  return ref.createNestApplication({ logger: false }).init();
}

describe('app.close() with builds in flight', () => {
  const NS = 'test:shutdown:app:';
  const N = 5;
  const ids = Array.from({ length: N }, (_, i) => `r${i}`);
  const logger = new MemoryLogger();
  let app: INestApplicationContext;
  let builds: Promise<string | undefined>[];
  let cached: Promise<string>;
  let closing: Promise<void>;

  beforeAll(async () => {
    app = await appOn(NS, logger);
    const reports = app.get(Reports);
    builds = ids.map((id) => reports.build(id));
    // A cache entry built meanwhile holds its lock in the same namespace.
    cached = app.get(BufferCache).getOrSet('entry', async () => {
      await gate.promise;
      return 'entry built';
    });
    await until(async () => (await lockKeys(NS)).length === N + 1);
    closing = app.close();
  });

  it('refuses a new call at once with lock_closed, and runs nothing for it', async () => {
    const call = app
      .get(Reports)
      .build('late')
      .then(
        () => 'ran',
        (error: unknown) => error,
      );
    const refused = await Promise.race([call, sleep(1000).then(() => 'still running')]);
    expect(refused).toBeInstanceOf(LockError);
    expect(refused).toMatchObject({ code: 'lock_closed' });
    expect(ran).not.toContain('late');
  });

  it('lets each build finish with its value, then leaves no lock key in Redis', async () => {
    gate.resolve();
    expect(await Promise.all(builds)).toEqual(ids.map((id) => `report ${id}`));
    expect(await cached).toBe('entry built');
    await closing;
    expect(await lockKeys(NS)).toEqual([]);
    const failed = logger.lines.filter((line) => /unlock failed|closed/i.test(line.text));
    expect(failed).toEqual([]);
  });

  it('so a second worker builds each key at once, not after lockTimeout', async () => {
    const other = otherWorker(NS);
    const before = Date.now();
    const values = await Promise.all(
      ids.map((id) => other.run(`report:${id}`, () => `again ${id}`, { onBusy: 'skip' })),
    );
    expect(values).toEqual(ids.map((id) => `again ${id}`));
    expect(Date.now() - before).toBeLessThan(1000);
    await other.close();
  });
});

describe('close() on an engine and a lock made with new', () => {
  it('abandons a build that outlasts shutdownTimeout: its lock is released when the bound ends', async () => {
    const NS = 'test:shutdown:abandon:';
    const logger = new MemoryLogger();
    const lock = new RedisLockService({
      redis: server.client(),
      namespace: NS,
      ttl: 30,
      shutdownTimeout: 0.3,
    });
    const engine = new SingleFlightEngine({ lock, options: { logger } });
    const endless = deferred<string>();
    const build = engine.run('slow', () => endless.promise);
    await until(async () => (await lockKeys(NS)).length === 1);
    const before = Date.now();
    await engine.close();
    const tookMs = Date.now() - before;
    expect(tookMs).toBeGreaterThanOrEqual(290);
    expect(tookMs).toBeLessThan(300 + 1000);
    expect(await lockKeys(NS)).toEqual([]);
    expect(logger.at('warn').some((line) => line.startsWith('1 builds still ran'))).toBe(true);
    // Its late end sends nothing and logs no failed release.
    endless.resolve('late');
    expect(await build).toBe('late');
    expect(logger.at('warn').filter((line) => /unlock/i.test(line))).toEqual([]);
    expect(await otherWorker(NS).run('slow', () => 'next', { onBusy: 'skip' })).toBe('next');
  });

  it("ends a call waiting for another process's lock with lock_closed, not at lockTimeout", async () => {
    const NS = 'test:shutdown:waiter:';
    const holder = new RedisLockService({ redis: server.client(), namespace: NS });
    const [guard] = await holder.acquire('busy');
    const lock = new RedisLockService({ redis: server.client(), namespace: NS });
    const engine = new SingleFlightEngine({ lock, options: { logger: silent, lockTimeout: 10 } });
    let ranWork = false;
    const waiting = engine.run('busy', () => (ranWork = true));
    await sleep(100);
    const before = Date.now();
    await engine.close();
    const outcome = await waiting.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ code: 'lock_closed' });
    expect(Date.now() - before).toBeLessThan(1000);
    expect(ranWork).toBe(false);
    await holder.release(guard!);
  });

  it('lock.close() waits for a holder to release, then takes no new lock', async () => {
    const NS = 'test:shutdown:lock:';
    const lock = new RedisLockService({ redis: server.client(), namespace: NS });
    const [guard] = await lock.acquire('held');
    let closed = false;
    const closing = lock.close().then(() => (closed = true));
    const [none, refused] = await lock.acquire('other');
    expect(none).toBeUndefined();
    expect(refused).toMatchObject({ code: 'lock_closed' });
    await sleep(100);
    expect(closed).toBe(false);
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    await closing;
    expect(await lockKeys(NS)).toEqual([]);
  });

  it.each([-1, 'abc', Number.NaN, 30 * 24 * 3600])(
    'a shutdownTimeout of %j is refused with shutdown_timeout_invalid',
    (shutdownTimeout) => {
      const make = (): RedisLockService =>
        new RedisLockService({
          redis: 'memory://',
          shutdownTimeout: shutdownTimeout as number,
        });
      expect(make).toThrow(BufferLockConfigError);
      expect(make).toThrow(/shutdownTimeout must be 0 or a positive number of seconds/);
    },
  );
});
