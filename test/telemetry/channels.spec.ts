import { createHash } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import { Redis } from 'ioredis';
import { defer, firstValueFrom, of, Subject, throwError } from 'rxjs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  BufferCache,
  LockError,
  RedisLockService,
  SingleFlightEngine,
  type BufferLockOptions,
} from '../../lib/index.js';
import type {
  BreakerMessage,
  CacheTrace,
  FlightTrace,
  LockLostMessage,
  LockTrace,
} from '../../lib/opentelemetry/index.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { deferred, until } from '../support/nest-helpers.js';
import { freePort, startRedis, type RedisServer } from '../support/redis-server.js';
import { silent, sleep } from '../single-flight/support.js';

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

type EventName = 'start' | 'end' | 'asyncStart' | 'asyncEnd' | 'error';
interface Seen<C> {
  readonly event: EventName;
  readonly context: C;
  /** The context's fields as they were when the event was published (result and error aside). */
  readonly fields: Record<string, unknown>;
}

/** Every event of the tracing channel `name`, in order, until `stop()`. */
function record<C extends object>(name: string): { seen: Seen<C>[]; stop: () => void } {
  const seen: Seen<C>[] = [];
  const channel = diagnostics.tracingChannel(name);
  const on = (event: EventName) => (message: unknown) => {
    const { result: _result, error: _error, ...fields } = message as Record<string, unknown>;
    seen.push({ event, context: message as C, fields: { ...fields } });
  };
  const handlers = {
    start: on('start'),
    end: on('end'),
    asyncStart: on('asyncStart'),
    asyncEnd: on('asyncEnd'),
    error: on('error'),
  };
  channel.subscribe(handlers);
  return { seen, stop: () => channel.unsubscribe(handlers) };
}

const stops: (() => void)[] = [];
afterEach(() => stops.splice(0).forEach((stop) => stop()));
function recording<C extends object>(name: string): Seen<C>[] {
  const { seen, stop } = record<C>(name);
  stops.push(stop);
  return seen;
}

/** The contexts that reached `event`. */
const at = <C>(seen: Seen<C>[], event: EventName): C[] =>
  seen.filter((s) => s.event === event).map((s) => s.context);

const md5 = (text: string): string => createHash('md5').update(text).digest('hex');

let n = 0;
const key = (): string => `secret-user-${++n}@example.com`;

function worker(options: Partial<Omit<BufferLockOptions, 'redis'>> = {}, ttl = 5) {
  const lock = new RedisLockService({
    redis: () => server.client(),
    namespace: 'test:telemetry:',
    ttl,
  });
  const engine = new SingleFlightEngine({ lock, options: { logger: silent, ...options } });
  const cache = new BufferCache({ lock, engine, options: { logger: silent, ...options } });
  return { lock, engine, cache };
}

describe('nestjs-buffer-lock:flight', () => {
  it('10 concurrent calls on one key: one leader holding the lock, 9 waiters; each call start, end, asyncStart, asyncEnd', async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const { engine } = worker();
    const k = key();
    const gate = deferred();
    let runs = 0;
    const calls = Array.from({ length: 10 }, () =>
      engine.run(k, async () => {
        runs++;
        await gate.promise;
        return 'report';
      }),
    );
    await until(() => runs === 1);
    await sleep(30);
    gate.resolve();
    expect(await Promise.all(calls)).toEqual(Array(10).fill('report'));
    expect(runs).toBe(1);
    for (const event of ['start', 'end', 'asyncStart', 'asyncEnd'] as const) {
      expect(at(seen, event)).toHaveLength(10);
    }
    expect(at(seen, 'error')).toEqual([]);
    // Each call's events come in order: start, end, then asyncStart and asyncEnd.
    for (const context of at(seen, 'start')) {
      expect(seen.filter((s) => s.context === context).map((s) => s.event)).toEqual([
        'start',
        'end',
        'asyncStart',
        'asyncEnd',
      ]);
    }
    // At start, only the key's hash: the hex MD5 of the cache key, never the key.
    for (const { fields } of seen.filter((s) => s.event === 'start')) {
      expect(fields).toEqual({ keyHash: md5(k) });
    }
    const done = at(seen, 'asyncEnd');
    const leaders = done.filter((c) => c.role === 'leader');
    const waiters = done.filter((c) => c.role === 'waiter');
    expect([leaders.length, waiters.length]).toEqual([1, 9]);
    expect(leaders[0]).toMatchObject({ locked: true, outcome: 'ok', result: 'report' });
    expect(leaders[0]!.waitMs).toBeGreaterThanOrEqual(0);
    // The lock was held at least while the work waited at the gate (30 ms).
    expect(leaders[0]!.holdMs).toBeGreaterThanOrEqual(25);
    for (const waiter of waiters) {
      expect(waiter).toMatchObject({ outcome: 'ok', result: 'report' });
      expect(waiter.waitMs).toBeGreaterThanOrEqual(25);
      expect(waiter.holdMs).toBeUndefined();
    }
    expect(JSON.stringify(seen.map((s) => s.fields))).not.toContain(k);
  });

  it("a failing work: the error event with the work's error, outcome 'error'", async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const { engine } = worker();
    const failure = new Error('the report failed');
    await expect(
      engine.run(key(), () => {
        throw failure;
      }),
    ).rejects.toBe(failure);
    expect(seen.map((s) => s.event)).toEqual(['start', 'end', 'error', 'asyncStart', 'asyncEnd']);
    const [context] = at(seen, 'error');
    expect(context).toMatchObject({ role: 'leader', locked: true, outcome: 'error' });
    expect(context!.error).toBe(failure);
  });

  it("share: true across processes: the other process's caller is 'shared' and waited for the leader", async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const a = worker({ share: true });
    const b = worker({ share: true });
    const k = key();
    const gate = deferred();
    const leader = a.engine.run(k, async () => {
      await gate.promise;
      return { total: 42 };
    });
    await until(async () => (await admin.exists(a.lock.redisKey(k))) === 1);
    const follower = b.engine.run(k, () => ({ total: -1 }));
    await sleep(50);
    gate.resolve();
    expect(await Promise.all([leader, follower])).toEqual([{ total: 42 }, { total: 42 }]);
    const done = at(seen, 'asyncEnd');
    expect(done.map((c) => c.role).toSorted()).toEqual(['leader', 'shared']);
    const shared = done.find((c) => c.role === 'shared')!;
    expect(shared.waitMs).toBeGreaterThanOrEqual(40);
    expect(shared).toMatchObject({ outcome: 'ok', keyHash: md5(k) });
  });

  it("'skip' while another process holds the key: a waiter, outcome 'skipped', nothing run", async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const a = worker();
    const b = worker({ onBusy: 'skip' });
    const k = key();
    const gate = deferred();
    const leader = a.engine.run(k, () => gate.promise.then(() => 'done'));
    await until(async () => (await admin.exists(a.lock.redisKey(k))) === 1);
    expect(await b.engine.run(k, () => 'ran')).toBeUndefined();
    gate.resolve();
    await leader;
    const skipped = at(seen, 'asyncEnd').filter((c) => c.outcome === 'skipped');
    expect(skipped).toHaveLength(1);
    expect(skipped[0]).toMatchObject({ role: 'waiter', result: undefined });
  });

  it('a leader without Redis: locked false, with the reason', async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const port = await freePort();
    const client = new Redis({
      port,
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    const lock = new RedisLockService({ redis: () => client, namespace: 'test:telemetry:' });
    const engine = new SingleFlightEngine({ lock, options: { logger: silent } });
    try {
      expect(await engine.run(key(), () => 'ran anyway')).toBe('ran anyway');
    } finally {
      engine.close();
      client.disconnect();
    }
    expect(at(seen, 'asyncEnd')).toMatchObject([
      { role: 'leader', locked: false, unlockedReason: 'redis-error', outcome: 'ok' },
    ]);
  });

  it('traceKeys: true puts the cache key in the trace too', async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const { engine } = worker({ traceKeys: true });
    const k = key();
    await engine.run(k, () => 1);
    expect(at(seen, 'start')[0]).toMatchObject({ keyHash: md5(k), key: k, role: 'leader' });
  });
});

describe('nestjs-buffer-lock:flight, Observable flights', () => {
  it('3 overlapping subscriptions: one leader holding the lock, 2 waiters; each its own operation', async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const { engine } = worker();
    const k = key();
    const source = new Subject<string>();
    let subscribed = 0;
    const work = () => defer(() => (subscribed++, source));
    const got = [1, 2, 3].map(() => firstValueFrom(engine.runObservable(k, work)));
    await until(() => subscribed === 1);
    // Only the start and end of each subscription so far.
    expect(seen.map((s) => s.event)).toEqual(['start', 'end', 'start', 'end', 'start', 'end']);
    await sleep(30);
    source.next('prices');
    source.complete();
    expect(await Promise.all(got)).toEqual(['prices', 'prices', 'prices']);
    await until(() => at(seen, 'asyncEnd').length === 3);
    const done = at(seen, 'asyncEnd');
    expect(done.map((c) => c.role).toSorted()).toEqual(['leader', 'waiter', 'waiter']);
    const leader = done.find((c) => c.role === 'leader')!;
    expect(leader).toMatchObject({ locked: true, outcome: 'ok', keyHash: md5(k) });
    expect(leader.holdMs).toBeGreaterThanOrEqual(25);
    for (const waiter of done.filter((c) => c.role === 'waiter')) {
      expect(waiter.waitMs).toBeGreaterThanOrEqual(25);
    }
    expect(JSON.stringify(seen.map((s) => s.fields))).not.toContain(k);
  });

  it("an Observable that errors: the error event with its error, outcome 'error'", async () => {
    const seen = recording<FlightTrace>('nestjs-buffer-lock:flight');
    const { engine } = worker();
    const failure = new Error('no prices');
    await expect(
      firstValueFrom(engine.runObservable(key(), () => throwError(() => failure))),
    ).rejects.toBe(failure);
    await until(() => at(seen, 'asyncEnd').length === 1);
    expect(seen.map((s) => s.event)).toEqual(['start', 'end', 'error', 'asyncStart', 'asyncEnd']);
    expect(at(seen, 'error')[0]).toMatchObject({
      role: 'leader',
      outcome: 'error',
      error: failure,
    });
  });
});

describe('nestjs-buffer-lock:lock', () => {
  it('acquire, busy, extend, release (with the hold time) and an extend of a lock gone', async () => {
    const seen = recording<LockTrace>('nestjs-buffer-lock:lock');
    const { lock } = worker();
    const k = key();
    const [guard] = await lock.acquire(k);
    expect(await lock.acquire(k)).toEqual([undefined, undefined]);
    await sleep(20);
    expect(await lock.extend(guard!)).toEqual([true, undefined]);
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    expect(await lock.extend(guard!)).toEqual([false, undefined]);
    const done = at(seen, 'asyncEnd');
    expect(done.map((c) => [c.operation, c.outcome])).toEqual([
      ['acquire', 'acquired'],
      ['acquire', 'busy'],
      ['extend', 'extended'],
      ['release', 'released'],
      ['extend', 'lost'],
    ]);
    for (const c of done) {
      expect(c.keyHash).toBe(md5(k));
      expect(c.durationMs).toBeGreaterThanOrEqual(0);
    }
    expect(done[3]!.holdMs).toBeGreaterThanOrEqual(15);
    expect(done[0]!.holdMs).toBeUndefined();
    expect(at(seen, 'error')).toEqual([]);
    expect(JSON.stringify(seen.map((s) => s.fields))).not.toContain(k);
  });

  it("a refused guard: the error event with the LockError, outcome 'failed'; the tuple unchanged", async () => {
    const seen = recording<LockTrace>('nestjs-buffer-lock:lock');
    const { lock } = worker();
    const [ok, error] = await lock.release({ key: 'elsewhere:' + md5('x'), token: 't' });
    expect(ok).toBe(false);
    expect(error).toBeInstanceOf(LockError);
    expect(seen.map((s) => s.event)).toEqual(['start', 'end', 'error', 'asyncStart', 'asyncEnd']);
    const [context] = at(seen, 'error');
    expect(context).toMatchObject({ operation: 'release', outcome: 'failed', keyHash: md5('x') });
    expect((context!.error as LockError).code).toBe('redis_invalid_guard');
  });
});

describe('nestjs-buffer-lock:cache', () => {
  it('a miss that builds, then hits; the miss has its wait and hold', async () => {
    const seen = recording<CacheTrace>('nestjs-buffer-lock:cache');
    const { cache } = worker();
    const k = key();
    expect(await cache.getOrSet(k, () => 'v1')).toBe('v1');
    expect(await cache.getOrSet(k, () => 'v2')).toBe('v1');
    expect(await cache.getOrSet(k, () => 'v3')).toBe('v1');
    const done = at(seen, 'asyncEnd');
    expect(done.map((c) => c.role)).toEqual(['miss', 'hit', 'hit']);
    expect(done[0]).toMatchObject({ built: true, outcome: 'ok', keyHash: md5(k) });
    expect(done[0]!.waitMs).toBeGreaterThanOrEqual(0);
    expect(done[0]!.holdMs).toBeGreaterThanOrEqual(0);
    expect(done[1]!.waitMs).toBeUndefined();
    expect(JSON.stringify(seen.map((s) => s.fields))).not.toContain(k);
  });

  it('10 concurrent lookups of a new key: 10 misses, one factory run', async () => {
    const seen = recording<CacheTrace>('nestjs-buffer-lock:cache');
    const { cache } = worker();
    const k = key();
    let builds = 0;
    const values = await Promise.all(
      Array.from({ length: 10 }, () => cache.getOrSet(k, async () => (await sleep(20), ++builds))),
    );
    expect(values).toEqual(Array(10).fill(1));
    expect(builds).toBe(1);
    const done = at(seen, 'asyncEnd');
    expect(done.map((c) => c.role)).toEqual(Array(10).fill('miss'));
    // One lookup started the build; the others joined it.
    expect(done.filter((c) => c.holdMs !== undefined)).toHaveLength(1);
  });

  it("a stale entry: the lookup is 'stale', its refresh its own 'refresh' operation", async () => {
    const seen = recording<CacheTrace>('nestjs-buffer-lock:cache');
    let now = Date.now();
    const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:tel:' });
    const cache = new BufferCache({ lock, options: { logger: silent }, now: () => now });
    const k = key();
    await cache.getOrSet(k, () => 'old', { ttl: 1, grace: 60 });
    now += 2_000;
    expect(await cache.getOrSet(k, () => 'new', { ttl: 1, grace: 60 })).toBe('old');
    await until(() => at(seen, 'asyncEnd').length === 3);
    expect(at(seen, 'asyncEnd').map((c) => [c.role, c.outcome])).toEqual([
      ['miss', 'ok'],
      ['stale', 'ok'],
      ['refresh', 'ok'],
    ]);
    expect(at(seen, 'asyncEnd')[2]).toMatchObject({ built: true });
  });

  it("a factory's error: the error event, outcome 'error'", async () => {
    const seen = recording<CacheTrace>('nestjs-buffer-lock:cache');
    const { cache } = worker();
    const failure = new Error('no report');
    await expect(cache.getOrSet(key(), () => Promise.reject(failure))).rejects.toBe(failure);
    expect(at(seen, 'error')).toHaveLength(1);
    expect(at(seen, 'error')[0]).toMatchObject({ role: 'miss', outcome: 'error', error: failure });
  });
});

describe('nestjs-buffer-lock:lock-lost and nestjs-buffer-lock:breaker', () => {
  it('a lock lost while the work runs is published with its hash and reason', async () => {
    const lost: LockLostMessage[] = [];
    const onLost = (message: unknown) => lost.push(message as LockLostMessage);
    diagnostics.subscribe('nestjs-buffer-lock:lock-lost', onLost);
    stops.push(() => diagnostics.unsubscribe('nestjs-buffer-lock:lock-lost', onLost));
    const { engine, lock } = worker({ lockTimeout: 0.2 }, 0.6);
    const k = key();
    await engine.run(k, async () => {
      const signal = currentFlight()!.signal;
      await admin.del(lock.redisKey(k));
      await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
    });
    expect(lost).toEqual([{ keyHash: md5(k), reason: 'lost' }]);
  });

  it('the breaker opening is published with its states', async () => {
    const moves: BreakerMessage[] = [];
    const onMove = (message: unknown) => moves.push(message as BreakerMessage);
    diagnostics.subscribe('nestjs-buffer-lock:breaker', onMove);
    stops.push(() => diagnostics.unsubscribe('nestjs-buffer-lock:breaker', onMove));
    const port = await freePort();
    const client = new Redis({
      port,
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
    });
    const lock = new RedisLockService({ redis: () => client, namespace: 'test:telemetry:' });
    const engine = new SingleFlightEngine({
      lock,
      options: { logger: silent, circuitBreaker: { failureThreshold: 2 } },
    });
    try {
      for (let i = 0; i < 3; i++) await engine.run(key(), () => i);
    } finally {
      engine.close();
      client.disconnect();
    }
    expect(moves).toEqual([{ state: 'open', previous: 'closed' }]);
  });
});

describe('without a subscriber', () => {
  it('no trace is built: the traced path is never entered, and no event reaches a late subscriber', async () => {
    // Every traced operation goes through TracingChannel#tracePromise, after its trace object.
    const prototype = Object.getPrototypeOf(diagnostics.tracingChannel('any')) as {
      tracePromise: (...args: unknown[]) => unknown;
    };
    const tracePromise = vi.spyOn(prototype, 'tracePromise');
    stops.push(() => tracePromise.mockRestore());
    const { engine, cache, lock } = worker();
    const exercise = async (): Promise<void> => {
      const k = key();
      await engine.run(k, () => 1);
      await firstValueFrom(engine.runObservable(k, () => of(1)));
      await cache.getOrSet(k, () => 2);
      await cache.getOrSet(k, () => 3);
      const [guard] = await lock.acquire(k);
      await lock.extend(guard!);
      await lock.release(guard!);
    };

    const flight = record<FlightTrace>('nestjs-buffer-lock:flight');
    const cached = record<CacheTrace>('nestjs-buffer-lock:cache');
    const locks = record<LockTrace>('nestjs-buffer-lock:lock');
    await exercise();
    const subscribed = tracePromise.mock.calls.length;
    // Two flights (each an acquire and a release), two lookups (the miss's build acquires, then
    // writes the entry and releases in one script: a release of the lock too), and the lock's own
    // acquire, extend and release.
    expect(at(flight.seen, 'start')).toHaveLength(2);
    expect(at(cached.seen, 'start')).toHaveLength(2);
    expect(at(locks.seen, 'start')).toHaveLength(9);
    // The Observable flight publishes its own events; its acquire and release go through tracePromise.
    expect(subscribed).toBe(1 + 2 + 9);

    flight.stop();
    cached.stop();
    locks.stop();
    for (const name of ['flight', 'cache', 'lock']) {
      expect(diagnostics.tracingChannel(`nestjs-buffer-lock:${name}`).hasSubscribers).toBe(false);
    }
    // A channel nobody listens to is of the plain Channel class; nothing may be published on it.
    const inactive = Object.getPrototypeOf(diagnostics.channel('nestjs-buffer-lock:flight')) as {
      publish: (message: unknown) => void;
    };
    const publish = vi.spyOn(inactive, 'publish');
    stops.push(() => publish.mockRestore());
    await exercise();
    expect(tracePromise.mock.calls.length).toBe(subscribed);
    expect(publish).not.toHaveBeenCalled();
    expect(flight.seen.length + cached.seen.length + locks.seen.length).toBe(4 * (2 + 2 + 9));
  });
});
