import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { LockWatchdog, type WatchdogOptions } from '../../lib/single-flight/watchdog.js';
import { type LockLostEvent } from '../../lib/types/events.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const ignore = (): void => {};

/** A watchdog whose lost lock resolves `lost`. */
function watch(
  options: Omit<WatchdogOptions, 'onLockLost'>,
  onLockLost: (event: LockLostEvent) => void = ignore,
) {
  let told!: (event: LockLostEvent) => void;
  const lost = new Promise<LockLostEvent>((resolve) => (told = resolve));
  const watchdog = new LockWatchdog({
    ...options,
    onLockLost: (event) => {
      told(event);
      onLockLost(event);
    },
  });
  return { watchdog, lost };
}

/** Resolves once the key's expiry was moved out again: the watchdog extended it. */
async function extended(key: string, ttlMs: number): Promise<void> {
  await sleep(ttlMs / 4);
  while ((await server.client().pttl(key)) <= ttlMs * 0.85) await sleep(10);
}

describe('watchdog: held → extended every ttl/3', () => {
  it('keeps a build of more than 3×TTL exclusive', async () => {
    const ttl = 1;
    const holder = new RedisLockService({ redis: server.client(), namespace: 'wd:long:', ttl });
    const rival = new RedisLockService({ redis: server.client(), namespace: 'wd:long:', ttl });
    const [guard] = await holder.acquire('build');
    const watchdog = new LockWatchdog({ lock: holder, guard: guard!, ttl, onLockLost: ignore });
    watchdog.start();
    const startedAt = Date.now();
    let rivalWins = 0;
    let rivalTries = 0;
    // The "build": runs until it has outlived three TTLs, while a rival keeps trying.
    while (Date.now() - startedAt < 3.5 * ttl * 1000) {
      const [stolen] = await rival.acquire('build');
      rivalTries++;
      if (stolen) rivalWins++;
      await sleep(50);
    }
    watchdog.stop();
    expect(rivalWins).toBe(0);
    expect(rivalTries).toBeGreaterThan(10);
    // Alive 3.5 TTLs after the acquire: at least three extensions, each within a TTL of the last.
    expect(await server.client().get(guard!.key)).toBe(guard!.token);
    expect(watchdog.signal.aborted).toBe(false);
    expect(await holder.release(guard!)).toEqual([true, undefined]);
  });

  it('stop() ends the extensions; the lock then expires by its TTL', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:stop:' });
    const [guard] = await lock.acquire('k', 0.3);
    const watchdog = new LockWatchdog({ lock, guard: guard!, ttl: 0.3, onLockLost: ignore });
    watchdog.start();
    await extended(guard!.key, 300);
    watchdog.stop();
    while ((await server.client().exists(guard!.key)) === 1) await sleep(20);
    expect(watchdog.signal.aborted).toBe(false);
  });
});

describe('watchdog: extension finds the lock gone → lockLost, signal aborted', () => {
  it('calls onLockLost once and aborts the signal with the event', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:lost:' });
    const [guard] = await lock.acquire('k', 0.6);
    const called: LockLostEvent[] = [];
    const { watchdog, lost } = watch({ lock, guard: guard!, ttl: 0.6 }, (e) => called.push(e));
    watchdog.start();
    // Another holder took over (as after an expiry during a long GC pause).
    await server.client().set(guard!.key, 'someone-else', 'PX', 60_000);
    const event = await lost;
    expect(event).toEqual({ key: guard!.key, reason: 'lost', error: undefined });
    expect(watchdog.signal.aborted).toBe(true);
    expect(watchdog.signal.reason).toBe(event);
    // It stopped: no further extension (or loss) after a few more intervals.
    await sleep(600);
    expect(called).toEqual([event]);
    expect(await server.client().pttl(guard!.key)).toBeGreaterThan(50_000);
    expect(await server.client().get(guard!.key)).toBe('someone-else');
  });

  it('a throwing callback is never an unhandled error', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:throw:' });
    const [guard] = await lock.acquire('k', 0.3);
    const watchdog = new LockWatchdog({
      lock,
      guard: guard!,
      ttl: 0.3,
      onLockLost: () => {
        throw new Error('callback bug');
      },
    });
    watchdog.start();
    await server.client().del(guard!.key);
    await new Promise<void>((resolve) =>
      watchdog.signal.addEventListener('abort', () => resolve()),
    );
    expect((watchdog.signal.reason as LockLostEvent).reason).toBe('lost');
  });
});

describe('watchdog: maxHold caps the hold', () => {
  it('no extension reaches past maxHold, then lockLost(maxHold)', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:cap:' });
    const [guard] = await lock.acquire('k', 0.9);
    const { watchdog, lost } = watch({ lock, guard: guard!, ttl: 0.9, maxHold: 0.5 });
    watchdog.start();
    const event = await lost;
    expect(event.reason).toBe('maxHold');
    // Uncapped, the last extension would have left ~600 ms; capped, it ends at maxHold.
    expect(await server.client().pttl(guard!.key)).toBeLessThanOrEqual(100);
    expect(watchdog.signal.aborted).toBe(true);
  });
});

describe('watchdog: Redis unreachable for a whole TTL → lockLost(unreachable)', () => {
  it('keeps trying, then gives the lock up with the last failure', async () => {
    const own = await startRedis();
    const lock = new RedisLockService({
      redis: own.client({ commandTimeout: 100, maxRetriesPerRequest: 0 }),
      namespace: 'wd:down:',
    });
    const [guard] = await lock.acquire('k', 0.6);
    const { watchdog, lost } = watch({ lock, guard: guard!, ttl: 0.6 });
    own.pause();
    try {
      const started = Date.now();
      watchdog.start();
      const event = await lost;
      expect(event.reason).toBe('unreachable');
      expect(event.error).toBeInstanceOf(Error);
      expect(Date.now() - started).toBeGreaterThanOrEqual(600);
      expect(watchdog.signal.aborted).toBe(true);
    } finally {
      own.resume();
      await own.stop();
    }
  });
});

describe('watchdog: finish() when the work ends', () => {
  it('a lock extended on time: finish() just stops, nothing is lost', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:finish:' });
    const [guard] = await lock.acquire('k', 0.3);
    const lost: LockLostEvent[] = [];
    const watchdog = new LockWatchdog({
      lock,
      guard: guard!,
      ttl: 0.3,
      onLockLost: (e) => lost.push(e),
    }).start();
    await extended(guard!.key, 300);
    watchdog.finish();
    expect(lost).toEqual([]);
    expect(watchdog.signal.aborted).toBe(false);
    expect(await server.client().get(guard!.key)).toBe(guard!.token);
  });

  it('an event loop stalled past the TTL (no extension could run): finish() reports the lock lost', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:stalled:' });
    const [guard] = await lock.acquire('k', 0.2);
    const called: LockLostEvent[] = [];
    const watchdog = new LockWatchdog({
      lock,
      guard: guard!,
      ttl: 0.2,
      onLockLost: (e) => called.push(e),
    }).start();
    // A synchronous build: no timer runs until it returns.
    for (const until = Date.now() + 300; Date.now() < until;);
    watchdog.finish();
    expect(called).toEqual([{ key: guard!.key, reason: 'lost', error: undefined }]);
    expect(watchdog.signal.aborted).toBe(true);
    expect(await server.client().exists(guard!.key)).toBe(0);
  });
});
