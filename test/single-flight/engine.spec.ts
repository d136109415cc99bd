import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ENGLISH_MESSAGES,
  LockBusyError,
  LockError,
  RedisLockService,
  RedisUnavailableError,
  SingleFlightEngine,
  type FlightLockLostEvent,
} from '../../lib/index.js';
import { resultKey } from '../../lib/redis/keys.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { type LockLostEvent } from '../../lib/types/events.js';
import { firstValueFrom, of, Subject, toArray, type Observable } from 'rxjs';
import { MemoryLogger, deferred, until } from '../support/nest-helpers.js';
import type { Cluster, Redis } from 'ioredis';
import { startRedisCluster } from '../support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { countingClient, countingLock, silent, sleep } from './support.js';

/**
 * The single-flight engine on a real Redis. A "worker" is one engine with its own lock service and
 * client: in one Node process they share nothing but Redis, as separate processes would (the
 * multi-process tests do the same with real processes).
 */

/** The Redis of the sections that run on both: a client factory, and how to stop it. */
interface Backend {
  client(): Redis | Cluster;
  stop(): Promise<void>;
}

const backends: Record<string, () => Promise<Backend>> = {
  async 'a standalone Redis'() {
    const server: RedisServer = await startRedis();
    return { client: () => server.client(), stop: () => server.stop() };
  },
  async 'a 3-master Redis Cluster'() {
    const cluster = await startRedisCluster();
    return { client: () => cluster.client(), stop: () => cluster.stop() };
  },
};

let backend: Backend;

interface Worker {
  engine: SingleFlightEngine;
  lock: RedisLockService;
  acquires: () => number;
}

function worker(
  namespace: string,
  options: NonNullable<ConstructorParameters<typeof SingleFlightEngine>[0]['options']> = {},
  lockOptions: { ttl?: number; fencing?: boolean } = {},
): Worker {
  const service = new RedisLockService({
    redis: () => backend.client(),
    namespace,
    ...lockOptions,
  });
  const { lock, acquires } = countingLock(service);
  const engine = new SingleFlightEngine({
    lock,
    options: { logger: silent, lockTimeout: 20, ...options },
  });
  return { engine, lock: service, acquires };
}

/** `work` for runObservable: counts its runs; the test drives the values through `source`. */
function observed(): {
  work: () => Observable<number>;
  source: Subject<number>;
  runs: () => number;
} {
  const source = new Subject<number>();
  let runs = 0;
  return {
    source,
    runs: () => runs,
    work: () => {
      runs++;
      return source;
    },
  };
}
const lockValue = (w: Worker, key: string): Promise<string | null> =>
  backend.client().get(w.lock.redisKey(key));

for (const [name, start] of Object.entries(backends)) {
  describe(`on ${name}`, () => {
    beforeAll(async () => {
      backend = await start();
    }, 60_000);
    afterAll(() => backend.stop());

    describe('1. two-level single flight: in-process callers share the leader’s promise', () => {
      it('200 concurrent callers: one Redis acquire, one run, the same value for all', async () => {
        const w = worker('tl:one:');
        let runs = 0;
        const gate = deferred();
        const calls = Array.from({ length: 200 }, () =>
          w.engine.run('cold', async () => {
            runs++;
            await gate.promise;
            return { built: runs };
          }),
        );
        expect(w.engine.inFlight).toBe(1);
        await until(() => runs === 1);
        gate.resolve();
        const values = await Promise.all(calls);
        expect(runs).toBe(1);
        expect(w.acquires()).toBe(1);
        expect(new Set(values).size).toBe(1); // the very same object
        expect(values[0]).toEqual({ built: 1 });
        expect(w.engine.inFlight).toBe(0);
      });

      it('followers get the leader’s very error; the next call after it is a new flight', async () => {
        const w = worker('tl:err:');
        const boom = new Error('boom');
        let runs = 0;
        const work = async (): Promise<string> => {
          runs++;
          await sleep(50);
          throw boom;
        };
        const outcomes = await Promise.allSettled(
          Array.from({ length: 20 }, () => w.engine.run('k', work)),
        );
        expect(outcomes.every((o) => o.status === 'rejected' && o.reason === boom)).toBe(true);
        expect([runs, w.acquires()]).toEqual([1, 1]);
        await expect(w.engine.run('k', () => 'again')).resolves.toBe('again');
        expect(w.acquires()).toBe(2);
      });

      it("'skip' and 'throw' callers that find a flight in progress skip or throw without Redis", async () => {
        const w = worker('tl:busy:');
        const gate = deferred();
        const started = deferred();
        const leader = w.engine.run('k', async () => {
          started.resolve();
          await gate.promise;
          return 'leader';
        });
        await started.promise;
        expect(w.acquires()).toBe(1);
        await expect(w.engine.run('k', () => 'x', { onBusy: 'skip' })).resolves.toBeUndefined();
        await expect(w.engine.run('k', () => 'x', { onBusy: 'throw' })).rejects.toBeInstanceOf(
          LockBusyError,
        );
        expect(w.acquires()).toBe(1);
        gate.resolve();
        expect(await leader).toBe('leader');
      });

      it('different keys are different flights', async () => {
        const w = worker('tl:keys:');
        const values = await Promise.all(['a', 'b', 'a', 'b'].map((k) => w.engine.run(k, () => k)));
        expect(values).toEqual(['a', 'b', 'a', 'b']);
        expect(w.acquires()).toBe(2);
      });
    });

    describe('1. two-level single flight: in-process subscriptions share one Observable flight', () => {
      it('200 concurrent subscriptions: one Redis acquire, one run, the same values in order for all', async () => {
        const w = worker('obs:one:');
        const { work, source, runs } = observed();
        const seen: number[][] = [];
        let completed = 0;
        const subscribe = () => {
          const values: number[] = [];
          seen.push(values);
          w.engine.runObservable('cold', work).subscribe({
            next: (n) => values.push(n!),
            complete: () => completed++,
          });
        };
        for (let i = 0; i < 200; i++) subscribe();
        expect(w.engine.inFlight).toBe(1);
        await until(() => source.observed);
        expect(await lockValue(w, 'cold')).not.toBeNull(); // held while the flight runs
        source.next(1);
        source.next(2);
        subscribe(); // a late joiner is replayed 1 and 2
        source.next(3);
        source.complete();
        expect(completed).toBe(201);
        expect(seen.every((values) => values.join() === '1,2,3')).toBe(true);
        expect([runs(), w.acquires()]).toEqual([1, 1]);
        expect(w.engine.inFlight).toBe(0);
        await until(async () => (await lockValue(w, 'cold')) === null);
      });

      it('subscribers share the very error; a subscription after the end is a new flight', async () => {
        const w = worker('obs:err:');
        const { work, source, runs } = observed();
        const boom = new Error('boom');
        const errors: unknown[] = [];
        for (let i = 0; i < 20; i++) {
          w.engine.runObservable('k', work).subscribe({ error: (e: unknown) => errors.push(e) });
        }
        await until(() => source.observed);
        source.next(1);
        source.error(boom);
        expect(errors).toHaveLength(20);
        expect(errors.every((e) => e === boom)).toBe(true);
        expect([runs(), w.acquires()]).toEqual([1, 1]);
        await until(async () => (await lockValue(w, 'k')) === null);

        const again = firstValueFrom(
          w.engine.runObservable('k', () => of('again')).pipe(toArray()),
        );
        expect(await again).toEqual(['again']);
        expect(w.acquires()).toBe(2);
      });

      it('unsubscribing every subscriber releases the lock and ends the flight', async () => {
        const w = worker('obs:unsub:');
        const { work, source, runs } = observed();
        const subscriptions = Array.from({ length: 10 }, () =>
          w.engine.runObservable('k', work).subscribe(),
        );
        await until(() => source.observed);
        expect(await lockValue(w, 'k')).not.toBeNull();
        subscriptions.slice(1).forEach((s) => s.unsubscribe());
        expect(source.observed).toBe(true); // one subscriber left: the flight goes on
        subscriptions[0]!.unsubscribe();
        expect(source.observed).toBe(false);
        expect(w.engine.inFlight).toBe(0);
        await until(async () => (await lockValue(w, 'k')) === null);
        expect([runs(), w.acquires()]).toEqual([1, 1]);

        const next = w.engine.runObservable('k', work).subscribe();
        await until(() => source.observed);
        expect([runs(), w.acquires()]).toEqual([2, 2]);
        next.unsubscribe();
      });

      it("'skip' and 'throw' subscribers that find a flight in progress skip or throw without Redis", async () => {
        const w = worker('obs:busy:');
        const { work, source } = observed();
        const leader = firstValueFrom(w.engine.runObservable('k', work).pipe(toArray()));
        await until(() => source.observed);
        const skipped = firstValueFrom(
          w.engine.runObservable('k', work, { onBusy: 'skip' }).pipe(toArray()),
        );
        expect(await skipped).toEqual([undefined]);
        await expect(
          firstValueFrom(w.engine.runObservable('k', work, { onBusy: 'throw' })),
        ).rejects.toBeInstanceOf(LockBusyError);
        expect(w.acquires()).toBe(1);
        source.next(5);
        source.complete();
        expect(await leader).toEqual([5]);
      });
    });

    describe('2. wake on release: waiters in other workers are woken by the release', () => {
      it('a waiter runs right after the holder releases, long before the TTL and the deadline', async () => {
        const a = worker('wk:', {}, { ttl: 60 });
        const b = worker('wk:', {}, { ttl: 60 });
        const order: string[] = [];
        const gate = deferred();
        const holder = a.engine.run('k', async () => {
          order.push('holder start');
          await gate.promise;
          order.push('holder end');
        });
        await until(() => order.length === 1);
        const waiter = b.engine.run('k', () => void order.push('waiter ran'));
        await sleep(200);
        expect(order).toEqual(['holder start']);
        const released = Date.now();
        gate.resolve();
        await Promise.all([holder, waiter]);
        expect(order).toEqual(['holder start', 'holder end', 'waiter ran']);
        expect(Date.now() - released).toBeLessThan(20_000); // the deadline (lockTimeout) is 20 s
        expect(b.acquires()).toBe(2); // busy once, then taken after the wake-up: no polling
      });
    });

    describe('3. share: the leader’s result reaches waiters in other workers', () => {
      it('3 workers × 50 callers: one run, everyone gets the value, ≤ 1 acquire per worker', async () => {
        const workers = [1, 2, 3].map(() => worker('sh:three:', { share: true }));
        let runs = 0;
        const started = deferred();
        const gate = deferred();
        const leaderCalls = Array.from({ length: 50 }, () =>
          workers[0]!.engine.run('cold', async () => {
            runs++;
            started.resolve();
            await gate.promise;
            return { total: 42, at: [1, 2] };
          }),
        );
        await started.promise;
        const others = workers.slice(1).flatMap((w) =>
          Array.from({ length: 50 }, () =>
            w.engine.run('cold', () => {
              runs++;
              return { total: -1, at: [] };
            }),
          ),
        );
        // The other workers found the lock busy: they wait for the release now.
        await until(() => workers.every((w) => w.acquires() === 1));
        gate.resolve();
        const values = await Promise.all([...leaderCalls, ...others]);
        expect(runs).toBe(1);
        expect(values.every((v) => JSON.stringify(v) === '{"total":42,"at":[1,2]}')).toBe(true);
        expect(workers.map((w) => w.acquires())).toEqual([1, 1, 1]);
      });

      it('an unserializable result: a clear catalog error at the first call, nothing stored', async () => {
        const w = worker('sh:bad:', { share: true });
        const error: unknown = await w.engine
          .run('stream', () => ({ body: Readable.from(['x']) }))
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(LockError);
        expect((error as LockError).code).toBe('shared_result_unserializable');
        expect((error as LockError).message).toBe(
          ENGLISH_MESSAGES.shared_result_unserializable
            .replace('KEY', 'stream')
            .replace('WHAT', 'a stream')
            .replace('PATH', '$.body'),
        );
        const admin = backend.client();
        expect(
          await admin.exists(w.lock.redisKey('stream'), resultKey(w.lock.redisKey('stream'))),
        ).toBe(0);
      });

      it('the leader throws: nothing is shared, and one waiter becomes the next leader', async () => {
        const workers = [1, 2, 3].map(() => worker('sh:throw:', { share: true }));
        const admin = backend.client();
        // An older result is in Redis: a failed leader must not let waiters read it.
        await admin.set(resultKey(workers[0]!.lock.redisKey('k')), '"stale"', 'PX', 60_000);
        const ran: string[] = [];
        const started = deferred();
        const gate = deferred();
        const failing = workers[0]!.engine.run('k', async () => {
          ran.push('first');
          started.resolve();
          await gate.promise;
          throw new Error('first failed');
        });
        await started.promise;
        const waiters = workers.slice(1).map((w, i) =>
          w.engine.run('k', async () => {
            ran.push(`next ${i}`);
            await sleep(100);
            return `from ${i}`;
          }),
        );
        // The other workers found the lock busy: they wait for the release now.
        await until(() => workers.every((w) => w.acquires() === 1));
        gate.resolve();
        await expect(failing).rejects.toThrow('first failed');
        const values = await Promise.all(waiters);
        expect(ran).toHaveLength(2); // the failed leader and exactly one successor
        expect(ran[0]).toBe('first');
        const successor = ran[1]!;
        expect(values).toEqual([`from ${successor.slice(5)}`, `from ${successor.slice(5)}`]);
      });
    });

    describe('4. long builds: watchdog, maxHold, lost lock, fencing', () => {
      it('the watchdog keeps a 3×TTL build exclusive', async () => {
        const ttl = 1.5; // extended every 0.5 s: room for a busy event loop
        const a = worker('wd:', {}, { ttl });
        const b = worker('wd:', { onBusy: 'skip' }, { ttl });
        let skipped = 0;
        const holder = a.engine.run('k', async () => {
          const end = Date.now() + 3 * ttl * 1000;
          while (Date.now() < end) {
            // Another worker tries all along; it must never get in.
            if ((await b.engine.run('k', () => 'intruder')) === undefined) skipped++;
            else throw new Error('the lock was not exclusive');
            await sleep(50);
          }
          return currentFlight()!.signal.aborted;
        });
        expect(await holder).toBe(false);
        expect(skipped).toBeGreaterThan(5);
      });

      it('a lost lock raises the event, logs, and aborts the signal; never an unhandled rejection', async () => {
        const logger = new MemoryLogger();
        const told: FlightLockLostEvent[] = [];
        const w = worker(
          'lost:',
          { logger, onLockLost: (e: FlightLockLostEvent) => told.push(e) },
          { ttl: 0.6 },
        );
        const events: FlightLockLostEvent[] = [];
        w.engine.on('lockLost', (e) => events.push(e));
        const admin = backend.client();
        const aborted = await w.engine.run('k', async () => {
          const signal = currentFlight()!.signal;
          await admin.del(w.lock.redisKey('k')); // someone else's hands on the key
          await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
          return signal.reason as LockLostEvent;
        });
        expect(aborted).toMatchObject({ reason: 'lost', key: w.lock.redisKey('k') });
        expect(events).toEqual([{ ...aborted, cacheKey: 'k' }]);
        expect(told).toEqual(events);
        expect(logger.at('warn')).toContain(
          ENGLISH_MESSAGES.lock_lost.replace('KEY', 'k').replace('REASON', 'lost'),
        );
      });

      it('maxHold caps the hold: the lock is let go and the work is told', async () => {
        const w = worker('maxhold:', { maxHold: 0.5 }, { ttl: 0.3 });
        const reason = await w.engine.run('k', async () => {
          const signal = currentFlight()!.signal;
          await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
          return (signal.reason as LockLostEvent).reason;
        });
        expect(reason).toBe('maxHold');
      });

      it('fencing: every holder of a key gets a larger number, across workers', async () => {
        const workers = [1, 2, 3].map(() => worker('fence:', {}, { fencing: true }));
        const fences: number[] = [];
        for (let round = 0; round < 4; round++) {
          for (const w of workers) {
            fences.push((await w.engine.run('k', () => currentFlight()!.fence))!);
          }
        }
        expect(fences.every((f, i) => i === 0 || f > fences[i - 1]!)).toBe(true);
      });
    });
  });
}

describe('5. failing fast: onRedisError and the circuit breaker', () => {
  it("onRedisError: 'throw' rejects with RedisUnavailableError (503) instead of running", async () => {
    const dead = new RedisLockService({
      redis: () => {
        throw new Error('ECONNREFUSED');
      },
      namespace: 'dead:',
    });
    const engine = new SingleFlightEngine({
      lock: dead,
      options: { logger: silent, circuitBreaker: false },
    });
    let ran = false;
    const error: unknown = await engine
      .run('k', () => (ran = true), { onRedisError: 'throw' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RedisUnavailableError);
    expect((error as RedisUnavailableError).getStatus()).toBe(503);
    expect((error as RedisUnavailableError).cause.code).toBe('redis_lock_failed');
    expect(ran).toBe(false);
    await expect(engine.run('k', () => 'proceeded')).resolves.toBe('proceeded');
  });

  it('a key that is no string: the catalog error, logged (proceed) or thrown (throw)', async () => {
    const logger = new MemoryLogger();
    const own = await startRedis();
    try {
      const lock = new RedisLockService({ redis: () => own.client(), namespace: 'badkey:' });
      const engine = new SingleFlightEngine({ lock, options: { logger } });
      await expect(engine.run(undefined as never, () => 'ran')).resolves.toBe('ran');
      expect(logger.at('error')).toEqual([
        ENGLISH_MESSAGES.lock_fail_open
          .replace('ERROR', ENGLISH_MESSAGES.lock_key_undefined)
          .replace('KEY', 'undefined'),
      ]);
      const error: unknown = await engine
        .run(42 as never, () => 'ran', { onRedisError: 'throw' })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockError);
      expect((error as LockError).code).toBe('lock_key_invalid');
      expect(engine.breaker?.consecutiveFailures).toBe(0); // not Redis's fault
    } finally {
      await own.stop();
    }
  });

  it('a key that cannot even be made a text (no prototype, a throwing toString): still the catalog error', async () => {
    const logger = new MemoryLogger();
    const own = await startRedis();
    try {
      const lock = new RedisLockService({ redis: () => own.client(), namespace: 'badkey:' });
      const engine = new SingleFlightEngine({ lock, options: { logger } });
      const keys = [
        Object.create(null) as object,
        {
          toString(): never {
            throw new Error('no text');
          },
        },
      ];
      for (const key of keys) {
        await expect(engine.run(key as never, () => 'ran')).resolves.toBe('ran');
        const error: unknown = await engine
          .run(key as never, () => 'ran', { onRedisError: 'throw' })
          .catch((e: unknown) => e);
        expect((error as LockError).code).toBe('lock_key_invalid');
      }
      // One line per interval: the second key's is counted, not written.
      expect(logger.at('error')).toEqual([
        ENGLISH_MESSAGES.lock_fail_open
          .replace('ERROR', ENGLISH_MESSAGES.lock_key_invalid)
          .replace('KEY', '[object Object]'),
      ]);
      engine.close();
    } finally {
      await own.stop();
    }
  });

  it('Redis paused: bounded calls, the breaker opens (no command reaches the client), then closes after SIGCONT', async () => {
    const own = await startRedis();
    try {
      const commandTimeout = 300;
      const { client, calls } = countingClient(
        own.client({ commandTimeout, maxRetriesPerRequest: 1 }),
      );
      await own.client().ping();
      const lock = new RedisLockService({ redis: client, namespace: 'cb:' });
      const states: string[] = [];
      const engine = new SingleFlightEngine({
        lock,
        options: {
          logger: silent,
          circuitBreaker: { failureThreshold: 3, openSeconds: 1, probes: 1 },
        },
      });
      engine.on('breaker', (state) => states.push(state));
      await expect(engine.run('k0', () => 'locked')).resolves.toBe('locked');

      own.pause();
      const slow: number[] = [];
      for (let i = 0; i < 3; i++) {
        const start = Date.now();
        expect(await engine.run(`p${i}`, () => 'fail-open')).toBe('fail-open');
        slow.push(Date.now() - start);
      }
      expect(states).toEqual(['open']);
      // Each call gave up after about commandTimeout (generous margin for a busy machine).
      expect(Math.max(...slow)).toBeLessThan(commandTimeout + 2000);
      const before = calls();
      for (let i = 0; i < 20; i++)
        expect(await engine.run(`o${i}`, () => 'skip-redis')).toBe('skip-redis');
      expect(calls()).toBe(before); // open: not one command was sent

      own.resume();
      await sleep(1100); // openSeconds
      expect(await engine.run('after', () => currentFlight()!.locked)).toBe(true);
      expect(states).toEqual(['open', 'half-open', 'closed']);
      // The timed-out acquires ran after SIGCONT; the releases sent behind them freed the keys.
      const keys = [0, 1, 2].map((i) => lock.redisKey(`p${i}`));
      expect(await own.client().exists(...keys)).toBe(0);
      expect(await engine.run('p0', () => currentFlight()!.locked, { lockTimeout: 1 })).toBe(true);
      expect(calls()).toBeGreaterThan(before);
    } finally {
      own.resume();
      await own.stop();
    }
  });
});
