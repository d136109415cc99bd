import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { BufferCache, BufferLockConfigError, Cached, RedisLockService } from '../../lib/index.js';
import { LOOKUP } from '../../lib/cache/buffer-cache.service.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());
afterEach(() => void vi.restoreAllMocks());

let n = 0;
const key = (): string => `early:${++n}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A cache as one worker process has it: its own client and lock; `now` may be a test's clock. */
function worker(
  options: ConstructorParameters<typeof BufferCache>[0]['options'] = {},
  now?: () => number,
  store?: object,
): BufferCache {
  const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:early:' });
  const logger = new MemoryLogger();
  return new BufferCache({ lock, store, options: { logger, ...options }, now });
}

/** What every reader of a hot key saw, and how its builds ran. */
interface HotRun {
  readonly missesAfterFirstBuild: number;
  readonly builds: number;
  readonly mostAtOnce: number;
  readonly refreshEvents: number;
  /** The builds the bound allows: the first, then one per half `ttl` elapsed since it began. */
  readonly allowed: number;
}

/**
 * A hot key (`ttl` 1 s, `grace` 0, a build of 50 ms) read every few ms by two workers on their
 * own clients for about three `ttl`s.
 */
async function hotKey(earlyRefresh?: boolean | number): Promise<HotRun> {
  const k = key();
  const options = { ttl: 1, grace: 0, earlyRefresh };
  const workers = [worker(), worker()];
  let builds = 0;
  let running = 0;
  let mostAtOnce = 0;
  let firstStarted = 0;
  const factory = async (): Promise<number> => {
    if (++builds === 1) firstStarted = Date.now();
    mostAtOnce = Math.max(mostAtOnce, ++running);
    await sleep(50);
    running--;
    return builds;
  };
  let refreshEvents = 0;
  for (const cache of workers) cache.on('refresh', () => refreshEvents++);
  await Promise.all(workers.map((cache) => cache[LOOKUP](k, factory, options)));
  expect(builds).toBe(1);
  let missesAfterFirstBuild = 0;
  const end = Date.now() + 3200;
  await Promise.all(
    workers.map(async (cache) => {
      while (Date.now() < end) {
        const { status } = await cache[LOOKUP](k, factory, options);
        if (status === 'miss') missesAfterFirstBuild++;
        await sleep(3);
      }
    }),
  );
  await until(() => running === 0);
  const allowed = 1 + Math.floor((Date.now() - firstStarted) / 500);
  console.info({ earlyRefresh, builds, allowed, missesAfterFirstBuild });
  return { missesAfterFirstBuild, builds, mostAtOnce, refreshEvents, allowed };
}

describe('earlyRefresh on a hot key, two workers, real Redis', () => {
  // Not flaky: the factory sleeps 50 ms, so δ ≥ ~50 ms and δ·β ≥ ~1000 ms with β = 20. Once less
  // than ttl/2 = 500 ms is left, a read triggers with P = exp(−left/(δ·β)) ≥ exp(−0.5) > 0.6.
  // From 500 ms left down to 150 ms left (room for a 50 ms build) the two readers make ~100 reads
  // (one each ~5 ms); with even 17 of them, no trigger has P < 0.4^17 < 1e-6. The other checks
  // always hold: one build at a time (the lock), and each refresh starts ttl/2 after the entry
  // before it was written (the bound), so never more than one build per 500 ms elapsed.
  it('with β = 20: no reader gets a miss after the first build, builds never overlap, ~2 builds per ttl', async () => {
    const run = await hotKey(20);
    expect(run.missesAfterFirstBuild).toBe(0);
    expect(run.mostAtOnce).toBe(1);
    expect(run.builds).toBeGreaterThanOrEqual(3);
    expect(run.builds).toBeLessThanOrEqual(run.allowed);
    expect(run.refreshEvents).toBeGreaterThanOrEqual(run.builds - 1);
  });

  it('without earlyRefresh (false by default), the same readers get misses as the entry expires', async () => {
    const run = await hotKey();
    expect(run.missesAfterFirstBuild).toBeGreaterThan(0);
    expect(run.refreshEvents).toBe(0);
    expect(run.mostAtOnce).toBe(1);
  });
});

/** A worker on a test clock whose builds take `deltaMs` on that clock. */
function clocked(deltaMs: number) {
  const clock = { t: 1_000_000 };
  const cache = worker({}, () => clock.t);
  let builds = 0;
  const factory = (): number => {
    clock.t += deltaMs;
    return ++builds;
  };
  let refreshes = 0;
  cache.on('refresh', () => refreshes++);
  return { cache, clock, factory, builds: () => builds, refreshes: () => refreshes };
}

describe('the early-refresh rule, drawn at fixed random numbers', () => {
  it('refreshes only in the last half of ttl, whatever the draw, and serves the fresh value meanwhile', async () => {
    const { cache, clock, factory, builds, refreshes } = clocked(50);
    const k = key();
    const options = { ttl: 60, earlyRefresh: 1 };
    await cache.getOrSet(k, factory, options);
    const freshUntil = clock.t + 60_000;
    // ln(1e-300) ≈ −691: −δ·β·ln(U) ≈ 34,539 ms, more than any time left below.
    vi.spyOn(Math, 'random').mockReturnValue(1e-300);
    clock.t = freshUntil - 30_001;
    expect(await cache[LOOKUP](k, factory, options)).toMatchObject({ value: 1, status: 'hit' });
    expect(refreshes()).toBe(0);
    clock.t = freshUntil - 29_999;
    expect(await cache[LOOKUP](k, factory, options)).toMatchObject({ value: 1, status: 'hit' });
    expect(refreshes()).toBe(1);
    // The refresh is not skipped although the entry it replaces is still fresh.
    await until(async () => (await cache.get(k)) === 2);
    expect(builds()).toBe(2);
    expect(await cache[LOOKUP](k, factory, options)).toMatchObject({ value: 2, status: 'hit' });
    expect(refreshes()).toBe(1);
  });

  it('triggers when −δ·β·ln(random()) reaches the time left; true is β = 1', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(0.5);
    // −50 · ln(0.5) ≈ 34.66 ms for β = 1, 69.3 ms for β = 2.
    for (const [earlyRefresh, left, expected] of [
      [true, 40, 0],
      [true, 34, 1],
      [1, 34, 1],
      [2, 70, 0],
      [2, 69, 1],
    ] as const) {
      const { cache, clock, factory, refreshes } = clocked(50);
      const k = key();
      const options = { ttl: 60, earlyRefresh };
      await cache.getOrSet(k, factory, options);
      clock.t += 60_000 - left;
      expect(await cache.getOrSet(k, factory, options)).toBe(1);
      expect([earlyRefresh, left, refreshes()]).toEqual([earlyRefresh, left, expected]);
    }
  });

  it('under the lock, skips only when another worker wrote a newer entry since the read', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1e-300);
    const clock = { t: 1_000_000 };
    // Entries in Redis, through a store that lets the test act right after a read.
    const redis = server.client();
    let afterRead: (() => Promise<void>) | undefined;
    let reads = 0;
    const store = {
      get: async (name: string): Promise<unknown> => {
        const text = await redis.get(name);
        reads++;
        const act = afterRead;
        afterRead = undefined;
        await act?.();
        return text;
      },
      set: (name: string, text: string, ttlMs: number) => redis.set(name, text, 'PX', ttlMs),
      delete: (name: string) => redis.del(name),
    };
    const [reader, other] = [worker({}, () => clock.t, store), worker({}, () => clock.t, store)];
    let builds = 0;
    const factory = (): number => ((clock.t += 50), ++builds);
    let refreshes = 0;
    reader.on('refresh', () => refreshes++);
    const k = key();
    const options = { ttl: 60, earlyRefresh: 20 };
    await reader.getOrSet(k, factory, options);
    clock.t += 59_000;
    // The reader reads the old entry; the other worker writes a newer one before the refresh's read.
    afterRead = () => other.set(k, 'newer', { ttl: 60 });
    const before = reads;
    expect(await reader.getOrSet(k, factory, options)).toBe(1);
    expect(refreshes).toBe(1);
    await until(() => reads >= before + 2);
    await sleep(50);
    expect(builds).toBe(1);
    expect(await reader.getOrSet(k, factory, options)).toBe('newer');
    await redis.quit();
  });

  it('never refreshes a set() entry early (it had no build: δ = 0), nor with earlyRefresh off', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1e-300);
    const { cache, clock, factory, builds, refreshes } = clocked(50);
    const k = key();
    await cache.set(k, 'given', { ttl: 60 });
    clock.t += 59_999;
    expect(await cache.getOrSet(k, factory, { ttl: 60, earlyRefresh: 20 })).toBe('given');
    const built = key();
    await cache.getOrSet(built, factory, { ttl: 60 });
    clock.t += 59_999;
    expect(await cache.getOrSet(built, factory, { ttl: 60 })).toBe(1);
    expect(await cache.getOrSet(built, factory, { ttl: 60, earlyRefresh: false })).toBe(1);
    expect(refreshes()).toBe(0);
    expect(builds()).toBe(1);
  });
});

describe('the earlyRefresh option', () => {
  it('is refused with cache_early_refresh_invalid unless true, false or a positive number', async () => {
    const cache = worker();
    for (const earlyRefresh of [0, -1, Number.NaN, Infinity, '1', 'true', null, {}]) {
      const refused = await cache
        .getOrSet(key(), () => 1, { earlyRefresh } as never)
        .catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(BufferLockConfigError);
      expect((refused as BufferLockConfigError).code).toBe('cache_early_refresh_invalid');
      expect(() => Cached('k', { earlyRefresh } as never)).toThrow(BufferLockConfigError);
      expect(() => worker({ cacheDefaults: { earlyRefresh } as never })).toThrow(
        expect.objectContaining({ code: 'cache_early_refresh_invalid' }),
      );
    }
    for (const earlyRefresh of [true, false, 1, 0.5, 20]) {
      await expect(cache.getOrSet(key(), () => 1, { earlyRefresh })).resolves.toBe(1);
      expect(() => Cached('k', { earlyRefresh })).not.toThrow();
    }
  });

  it('is taken from cacheDefaults', async () => {
    vi.spyOn(Math, 'random').mockReturnValue(1e-300);
    const clock = { t: 1_000_000 };
    const cache = worker({ cacheDefaults: { ttl: 60, earlyRefresh: true } }, () => clock.t);
    let refreshes = 0;
    cache.on('refresh', () => refreshes++);
    const k = key();
    const factory = (): string => ((clock.t += 50), 'v');
    await cache.getOrSet(k, factory);
    clock.t += 59_000;
    expect(await cache.getOrSet(k, factory)).toBe('v');
    expect(refreshes).toBe(1);
  });
});
