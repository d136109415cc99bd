import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { LockWatchdog } from '../../lib/single-flight/watchdog.js';
import { type LockLostEvent } from '../../lib/types/events.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('watchdog: held → extended every ttl/3', () => {
  it('keeps a build of more than 3×TTL exclusive', async () => {
    const ttl = 1;
    const holder = new RedisLockService({ redis: server.client(), namespace: 'wd:long:', ttl });
    const rival = new RedisLockService({ redis: server.client(), namespace: 'wd:long:', ttl });
    const [guard] = await holder.acquire('build');
    const watchdog = new LockWatchdog({ lock: holder, guard: guard!, ttl }).start();
    let extensions = 0;
    watchdog.on('extended', () => extensions++);
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
    expect(extensions).toBeGreaterThanOrEqual(3);
    expect(await server.client().get(guard!.key)).toBe(guard!.token);
    expect(watchdog.signal.aborted).toBe(false);
    expect(await holder.release(guard!)).toEqual([true, undefined]);
  });

  it('stop() ends the extensions; the lock then expires by its TTL', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:stop:' });
    const [guard] = await lock.acquire('k', 0.3);
    const watchdog = new LockWatchdog({ lock, guard: guard!, ttl: 0.3 }).start();
    await once(watchdog, 'extended');
    watchdog.stop();
    expect(watchdog.active).toBe(false);
    while ((await server.client().exists(guard!.key)) === 1) await sleep(20);
    expect(watchdog.signal.aborted).toBe(false);
  });
});

describe('watchdog: extension finds the lock gone → lockLost, signal aborted', () => {
  it('emits lockLost, calls onLockLost and aborts the signal with the event', async () => {
    const lock = new RedisLockService({ redis: server.client(), namespace: 'wd:lost:' });
    const [guard] = await lock.acquire('k', 0.6);
    const called: LockLostEvent[] = [];
    const watchdog = new LockWatchdog({
      lock,
      guard: guard!,
      ttl: 0.6,
      onLockLost: (e) => called.push(e),
    }).start();
    // Another holder took over (as after an expiry during a long GC pause).
    await server.client().set(guard!.key, 'someone-else', 'PX', 60_000);
    const [event] = (await once(watchdog, 'lockLost')) as [LockLostEvent];
    expect(event).toEqual({ key: guard!.key, reason: 'lost', error: undefined });
    expect(called).toEqual([event]);
    expect(watchdog.signal.aborted).toBe(true);
    expect(watchdog.signal.reason).toBe(event);
    expect(watchdog.active).toBe(false);
    expect(await server.client().get(guard!.key)).toBe('someone-else');
  });

  it('a throwing listener or callback is never an unhandled error', async () => {
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
    watchdog.on('lockLost', () => {
      throw new Error('listener bug');
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
    const watchdog = new LockWatchdog({ lock, guard: guard!, ttl: 0.9, maxHold: 0.5 }).start();
    const [event] = (await once(watchdog, 'lockLost')) as [LockLostEvent];
    expect(event.reason).toBe('maxHold');
    // Uncapped, the last extension would have left ~600 ms; capped, it ends at maxHold.
    expect(await server.client().pttl(guard!.key)).toBeLessThanOrEqual(100);
    expect(watchdog.signal.aborted).toBe(true);
  });
});

describe('watchdog: Redis unreachable for a whole TTL → lockLost(unreachable)', () => {
  it('reports extendFailed on each try, then gives the lock up', async () => {
    const own = await startRedis();
    const lock = new RedisLockService({
      redis: own.client({ commandTimeout: 100, maxRetriesPerRequest: 0 }),
      namespace: 'wd:down:',
    });
    const [guard] = await lock.acquire('k', 0.6);
    const watchdog = new LockWatchdog({ lock, guard: guard!, ttl: 0.6 });
    const failures: Error[] = [];
    watchdog.on('extendFailed', (e) => failures.push(e));
    own.pause();
    try {
      watchdog.start();
      const [event] = (await once(watchdog, 'lockLost')) as [LockLostEvent];
      expect(event.reason).toBe('unreachable');
      expect(event.error).toBe(failures.at(-1));
      expect(failures.length).toBeGreaterThanOrEqual(1);
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
    const watchdog = new LockWatchdog({ lock, guard: guard!, ttl: 0.3 }).start();
    const lost: LockLostEvent[] = [];
    watchdog.on('lockLost', (e) => lost.push(e));
    await once(watchdog, 'extended');
    watchdog.finish();
    expect(watchdog.active).toBe(false);
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
    const lost: LockLostEvent[] = [];
    watchdog.on('lockLost', (e) => lost.push(e));
    // A synchronous build: no timer runs until it returns.
    for (const until = Date.now() + 300; Date.now() < until;);
    watchdog.finish();
    expect(lost).toEqual([{ key: guard!.key, reason: 'lost', error: undefined }]);
    expect(called).toEqual(lost);
    expect(watchdog.signal.aborted).toBe(true);
    expect(watchdog.active).toBe(false);
    expect(await server.client().exists(guard!.key)).toBe(0);
  });
});
