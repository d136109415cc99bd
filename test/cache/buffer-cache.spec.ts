import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  connectFailFast,
  ENGLISH_MESSAGES,
  LockError,
  RedisLockService,
  RedisUnavailableError,
  type BufferCacheStore,
} from '../../lib/index.js';
import { commandStats } from '../support/command-stats.js';
import { MemoryLogger, deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

let n = 0;
/** A cache as one worker process has it: its own client, lock, engine and log. */
function worker(
  options: ConstructorParameters<typeof BufferCache>[0]['options'] = {},
  store?: object,
): { cache: BufferCache; logger: MemoryLogger } {
  const logger = new MemoryLogger();
  const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:cache:' });
  const cache = new BufferCache({ lock, store, options: { logger, ...options } });
  return { cache, logger };
}
const key = (): string => `report:${++n}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The commands the server ran while `run` ran, by name (from INFO commandstats). */
async function commandsDuring(run: () => Promise<unknown>): Promise<Record<string, number>> {
  const before = await commandStats(admin);
  await run();
  const after = await commandStats(admin);
  const delta: Record<string, number> = {};
  for (const [name, calls] of after) {
    const d = calls - (before.get(name) ?? 0);
    if (d > 0 && name !== 'info') delta[name] = d;
  }
  return delta;
}

describe('a fresh hit', () => {
  it('is served from the store: one read, no lock command, the factory not called', async () => {
    const { cache } = worker();
    const k = key();
    let builds = 0;
    await cache.getOrSet(k, () => ++builds);
    const commands = await commandsDuring(async () => {
      expect(await cache.getOrSet(k, () => ++builds)).toBe(1);
    });
    expect(builds).toBe(1);
    // The one read is a script (EVALSHA of GET); no SET NX, no release.
    expect(commands).toEqual({ evalsha: 1, get: 1 });
  });

  it('concurrent calls of one key share one read, and each call has its own hit event', async () => {
    const { cache } = worker();
    const k = key();
    await cache.getOrSet(k, () => 'value');
    let hits = 0;
    cache.on('hit', (at) => void (at === k && hits++));
    const commands = await commandsDuring(async () => {
      const values = await Promise.all(
        Array.from({ length: 50 }, () => cache.getOrSet(k, () => 'other')),
      );
      expect(values).toEqual(Array.from({ length: 50 }, () => 'value'));
    });
    expect(commands).toEqual({ evalsha: 1, get: 1 });
    expect(hits).toBe(50);
  });

  it('caches every value the factory returns, falsy ones included', async () => {
    const { cache } = worker();
    for (const value of [0, '', false, null]) {
      const k = key();
      let builds = 0;
      await cache.getOrSet(k, () => (builds++, value));
      expect(await cache.getOrSet(k, () => (builds++, 'other'))).toBe(value);
      expect(builds).toBe(1);
    }
  });
});

describe('a miss', () => {
  it('is built once per process: concurrent callers share one factory call', async () => {
    const { cache } = worker();
    const k = key();
    const gate = deferred<void>();
    let builds = 0;
    const calls = Array.from({ length: 50 }, () =>
      cache.getOrSet(k, async () => {
        builds++;
        await gate.promise;
        return 'built';
      }),
    );
    gate.resolve();
    expect(await Promise.all(calls)).toEqual(Array(50).fill('built'));
    expect(builds).toBe(1);
  });

  it('is built once across processes: the others wait for the release and read the entry', async () => {
    const workers = [worker(), worker(), worker()];
    const k = key();
    let builds = 0;
    const events: string[] = [];
    for (const { cache } of workers) {
      cache.on('built', () => events.push('built'));
      cache.on('shared', () => events.push('shared'));
    }
    const calls = workers.flatMap(({ cache }) =>
      Array.from({ length: 20 }, () =>
        cache.getOrSet(k, async () => {
          builds++;
          await sleep(150);
          return { total: 42 };
        }),
      ),
    );
    const values = await Promise.all(calls);
    expect(values.every((v) => v.total === 42)).toBe(true);
    expect(builds).toBe(1);
    expect(events.toSorted()).toEqual(['built', 'shared', 'shared']);
  });

  it('writes the entry, releases the lock and wakes the waiters in one script on the built-in store', async () => {
    const { cache } = worker();
    const k = key();
    const commands = await commandsDuring(() => cache.getOrSet(k, () => 'v'));
    // One script reads (a miss), takes the lock (SET NX) and claims it (SET); one writes the entry
    // (SET), releases the lock and its claim (DEL, DEL) and wakes the waiters (SPUBLISH).
    expect(commands).toMatchObject({ set: 3, del: 2, spublish: 1 });
    expect(commands.evalsha).toBe(2);
  });

  it('a factory that throws with no entry to fall back on rejects every caller with its error', async () => {
    const { cache } = worker();
    const k = key();
    const boom = new Error('database down');
    const calls = [1, 2, 3].map(() => cache.getOrSet(k, () => Promise.reject(boom)));
    for (const call of calls) await expect(call).rejects.toBe(boom);
    expect(await cache.getOrSet(k, () => 'next call builds anew')).toBe('next call builds anew');
  });

  it('refuses a value the serializer cannot store, with the catalog error, and stores nothing', async () => {
    const { cache } = worker();
    const k = key();
    const error = await cache.getOrSet(k, () => ({ at: new Map() })).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect((error as LockError).code).toBe('cache_value_unserializable');
    expect((error as LockError).message).toBe(
      ENGLISH_MESSAGES.cache_value_unserializable
        .replace('KEY', k)
        .replace('WHAT', 'a Map')
        .replace('PATH', '$.at'),
    );
    expect(await cache.get(k)).toBeUndefined();
  });

  it('after delete(), a stampede builds the entry once', async () => {
    const workers = [worker(), worker()];
    const k = key();
    let builds = 0;
    await workers[0]!.cache.getOrSet(k, () => ++builds);
    await workers[0]!.cache.delete(k);
    const values = await Promise.all(
      workers.flatMap(({ cache }) =>
        Array.from({ length: 10 }, () =>
          cache.getOrSet(k, async () => {
            await sleep(50);
            return ++builds;
          }),
        ),
      ),
    );
    expect(new Set(values)).toEqual(new Set([2]));
    expect(builds).toBe(2);
  });
});

describe('a stale entry (past ttl, within grace)', () => {
  it('is served at once while one worker in the fleet refreshes it in the background', async () => {
    const workers = [worker(), worker(), worker()];
    const k = key();
    let builds = 0;
    const factory = async () => {
      builds++;
      await sleep(200);
      return `v${builds}`;
    };
    await workers[0]!.cache.getOrSet(k, factory, { ttl: 0.1, grace: 30 });
    await sleep(150);
    const refreshes: string[] = [];
    let refreshed = 0;
    for (const { cache } of workers) {
      cache.on('refresh', () => refreshes.push('refresh'));
      cache.on('built', () => refreshed++);
    }
    const served = await Promise.all(
      workers.flatMap(({ cache }) =>
        Array.from({ length: 10 }, () =>
          cache
            .getOrSet(k, factory, { ttl: 0.1, grace: 30 })
            .then((value) => ({ value, beforeRefreshEnded: refreshed === 0 })),
        ),
      ),
    );
    // Nobody waited for the 200 ms refresh: everyone got the stale value before it ended.
    expect(served).toEqual(
      Array.from({ length: 30 }, () => ({ value: 'v1', beforeRefreshEnded: true })),
    );
    await until(() => refreshed === 1);
    await sleep(50);
    expect(builds).toBe(2);
    expect(refreshed).toBe(1);
    expect(refreshes.length).toBeGreaterThanOrEqual(1);
    expect(await workers[1]!.cache.getOrSet(k, factory, { ttl: 0.1, grace: 30 })).toBe('v2');
  });

  it('with timeout, a caller waits that long for the refresh and gets the new value', async () => {
    const { cache } = worker();
    const k = key();
    await cache.getOrSet(k, () => 'old', { ttl: 0.05, grace: 30 });
    await sleep(80);
    const value = await cache.getOrSet(
      k,
      async () => {
        await sleep(20);
        return 'new';
      },
      { ttl: 0.05, grace: 30, timeout: 1 },
    );
    expect(value).toBe('new');
  });

  it('a call with other options than the call under way for its key keeps its own', async () => {
    const { cache } = worker();
    const k = key();
    await cache.getOrSet(k, () => 'old', { ttl: 0.05, grace: 30 });
    await sleep(80);
    const refresh = async (): Promise<string> => {
      await sleep(20);
      return 'new';
    };
    // The first is served stale at once; the second, asked meanwhile, waits for the refresh.
    const served = await Promise.all([
      cache.getOrSet(k, refresh, { ttl: 0.05, grace: 30 }),
      cache.getOrSet(k, refresh, { ttl: 0.05, grace: 30, timeout: 1 }),
    ]);
    expect(served).toEqual(['old', 'new']);
  });

  it('a refresh that fails keeps serving the stale entry, is logged, and is retried after a back-off', async () => {
    const { cache, logger } = worker();
    const k = key();
    const options = { ttl: 0.05, grace: 30 };
    await cache.getOrSet(k, () => 'good', options);
    await sleep(80);
    let tries = 0;
    const failures: unknown[] = [];
    cache.on('refresh-failed', (_key, error) => failures.push(error));
    const failing = () => {
      tries++;
      return Promise.reject(new Error('upstream 500'));
    };
    expect(await cache.getOrSet(k, failing, options)).toBe('good');
    await until(() => failures.length === 1);
    // Within the back-off: stale served, no new try.
    expect(await cache.getOrSet(k, failing, options)).toBe('good');
    expect(await cache.getOrSet(k, failing, options)).toBe('good');
    await sleep(50);
    expect(tries).toBe(1);
    expect(logger.at('warn').some((line) => line.includes('upstream 500'))).toBe(true);
  });
});

describe('trouble', () => {
  it('a store that throws is read as a miss: the call builds, returns the value, and logs once', async () => {
    const broken: BufferCacheStore = {
      get: () => Promise.reject(new Error('store unreachable')),
      set: () => Promise.reject(new Error('store unreachable')),
      delete: () => Promise.reject(new Error('store unreachable')),
    };
    const { cache, logger } = worker({}, broken);
    const k = key();
    expect(await cache.getOrSet(k, () => 'built anyway')).toBe('built anyway');
    expect(await cache.getOrSet(k, () => 'built again')).toBe('built again');
    const lines = logger.at('error').filter((l) => l.includes('store unreachable'));
    expect(lines).toEqual([
      ENGLISH_MESSAGES.cache_store_failed.replace('ERROR', 'store unreachable'),
    ]);
  });

  it("a store that answers a read with another key's entry is a miss, logged without either key: never the other key's value", async () => {
    const memory = new Map<string, string>();
    let last: string | undefined;
    // As a client whose replies went out of step after a reconnect: the last text written.
    const crossed: BufferCacheStore = {
      get: (k) => (memory.has(k) ? last : undefined),
      set: (k, v) => {
        memory.set(k, v);
        last = v;
      },
      delete: (k) => void memory.delete(k),
    };
    const { cache, logger } = worker({}, crossed);
    const [alice, bob] = [key(), key()];
    await cache.set(`${alice}:alice`, { user: 'alice' });
    await cache.set(`${bob}:bob`, { user: 'bob' });
    expect(await cache.get(`${alice}:alice`)).toBeUndefined();
    expect(await cache.getOrSet(`${alice}:alice`, () => ({ user: 'alice, built' }))).toEqual({
      user: 'alice, built',
    });
    expect(await cache.get(`${alice}:alice`)).toEqual({ user: 'alice, built' });
    const warned = logger.at('warn');
    expect(warned).toContain(
      ENGLISH_MESSAGES.cache_entry_unreadable.replace('ERROR', "another key's entry"),
    );
    expect(warned.some((l) => l.includes('alice') || l.includes('bob'))).toBe(false);
  });
});

/** A cache whose lock's Redis was stopped; its entries in a Map unless `builtIn`. */
async function deadLockCache(
  options: { onRedisError?: 'throw' | 'proceed' } = {},
  builtIn = false,
) {
  const dead = await startRedis();
  await dead.stop();
  const memory = new Map<string, string>();
  const store: BufferCacheStore = {
    get: (k) => memory.get(k),
    set: (k, v) => void memory.set(k, v),
    delete: (k) => void memory.delete(k),
  };
  const lock = new RedisLockService({
    redis: () => connectFailFast(dead.url),
    namespace: 'test:cache:stopped:',
  });
  const logger = new MemoryLogger();
  const cache = new BufferCache({
    lock,
    store: builtIn ? undefined : store,
    options: { logger, circuitBreaker: false, ...options },
  });
  return { cache, logger };
}

describe("the lock's Redis stopped", () => {
  it("onRedisError: 'throw': a miss rejects with RedisUnavailableError and runs nothing", async () => {
    const { cache } = await deadLockCache({ onRedisError: 'throw' });
    let ran = false;
    const error = await cache.getOrSet(key(), () => (ran = true)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect((error as RedisUnavailableError).message).toBe(ENGLISH_MESSAGES.redis_unavailable);
    expect((error as RedisUnavailableError).getStatus()).toBe(503);
    expect(ran).toBe(false);
  });

  it("onRedisError: 'throw': a fresh hit is still served from the store, with no lock", async () => {
    const { cache } = await deadLockCache({ onRedisError: 'throw' });
    const k = key();
    await expect(cache.set(k, 'preset')).rejects.toMatchObject({ code: 'cache_write_failed' });
    expect(await cache.getOrSet(k, () => 'not called')).toBe('preset');
  });

  it("onRedisError: 'throw' on the built-in store: the failing read is a miss (logged), then the 503", async () => {
    const { cache, logger } = await deadLockCache({ onRedisError: 'throw' }, true);
    const error = await cache.getOrSet(key(), () => 'not run').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect(
      logger
        .at('error')
        .some((l) => l.startsWith(ENGLISH_MESSAGES.cache_store_failed.split('ERROR')[0]!)),
    ).toBe(true);
  });

  it("the default 'proceed': the build runs without the lock (logged), and its value is not stored", async () => {
    const { cache, logger } = await deadLockCache();
    const k = key();
    expect(await cache.getOrSet(k, () => 'fail-open')).toBe('fail-open');
    // Only a build under the lock is checked against the writes made while it ran: an unlocked
    // one could store a value a delete had already replaced.
    expect(await cache.getOrSet(k, () => 'built again')).toBe('built again');
    expect(logger.at('error').length).toBeGreaterThanOrEqual(1);
  });

  it('a set() while the lock is down still writes a store of its own, which serves it, and rejects: a build in flight was not outdated', async () => {
    const { cache } = await deadLockCache();
    const k = key();
    const error = await cache.set(k, 'preset').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect((error as LockError).code).toBe('cache_write_failed');
    expect(await cache.getOrSet(k, () => 'not called')).toBe('preset');
    await expect(cache.delete(k)).rejects.toMatchObject({ code: 'cache_write_failed' });
    expect(await cache.getOrSet(k, () => 'built')).toBe('built');
  });

  it('a set() with tags while the lock is down deletes the entry it replaces instead, and rejects: nothing is stored that its tags could not invalidate', async () => {
    const { cache } = await deadLockCache();
    const k = key();
    await expect(cache.set(k, 'old')).rejects.toMatchObject({ code: 'cache_write_failed' });
    expect(await cache.get(k)).toBe('old');
    const error = await cache.set(k, 'new', { tags: ['t'] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockError);
    expect((error as LockError).code).toBe('cache_write_failed');
    expect((error as LockError).cause).toBeInstanceOf(Error);
    expect(await cache.get(k)).toBeUndefined();
    expect(await cache.getOrSet(k, () => 'built')).toBe('built');
  });
});

describe('options', () => {
  it('bad per-call options are refused with the catalog error', async () => {
    const { cache } = worker();
    const error = await cache
      .getOrSet(key(), () => 1, { ttl: 0, grace: -1 } as never)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).violations.map((v) => v.code)).toEqual([
      'cache_ttl_invalid',
      'cache_grace_invalid',
    ]);
  });

  it('set() stores a fresh entry that getOrSet() serves without building', async () => {
    const { cache } = worker();
    const k = key();
    await cache.set(k, { preset: true }, { ttl: 60 });
    expect(await cache.getOrSet(k, () => ({ preset: false }))).toEqual({ preset: true });
  });
});

it('keeps the test output free of unhandled rejections', async () => {
  // A refresh that fails in the background must never surface as an unhandled rejection.
  const unhandled: unknown[] = [];
  const listener = (reason: unknown) => unhandled.push(reason);
  process.on('unhandledRejection', listener);
  const { cache } = worker();
  const k = key();
  await cache.getOrSet(k, () => 'x', { ttl: 0.02, grace: 5 });
  await sleep(40);
  await cache.getOrSet(k, () => Promise.reject(new Error('bg')), { ttl: 0.02, grace: 5 });
  await sleep(100);
  process.off('unhandledRejection', listener);
  expect(unhandled).toEqual([]);
});
