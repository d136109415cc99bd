import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { firstValueFrom, of } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  LockError,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
  type SingleFlightOptions,
} from '../../lib/index.js';
import { TIMER_SECONDS } from '../../lib/options/seconds.js';
import { anyValue, fuzzParameters, isSeconds } from '../fuzz/fuzz.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { MemoryLogger } from '../support/nest-helpers.js';

/**
 * A call's own options are checked on every path as the module's are: `run`, `runObservable`,
 * `@SingleFlight` and `getOrSet` refuse an invalid one with a `BufferLockConfigError` naming it,
 * and never run the function (nor take the lock, nor run without it); `acquire` answers its
 * `redis_ttl_invalid` tuple and sends nothing. Failing open is for Redis trouble only.
 */

const FILE = 'test/single-flight/per-call-options.spec.ts';
const NS = 'test:per-call:';
let server: RedisServer;
let admin: Redis;
let lock: RedisLockService;
let engine: SingleFlightEngine;
let cache: BufferCache;
const logger = new MemoryLogger();

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  lock = new RedisLockService({ redis: server.client(), namespace: NS });
  engine = new SingleFlightEngine({ lock, options: { logger } });
  cache = new BufferCache({ lock, engine, options: { logger, cachePrefix: `${NS}cache:` } });
});
afterAll(async () => {
  await engine.close();
  await server.stop();
});

/** Seconds a timer can wait for: what `ttl`, `lockTimeout` and `maxHold` take. */
const isTimerSeconds = (v: unknown): boolean => isSeconds(v) && Number(v) <= TIMER_SECONDS;
const given = (v: unknown): boolean => v !== undefined;

/** Each per-call option with values its rule refuses; `undefined` is "not given". */
const INVALID: Readonly<Record<keyof SingleFlightOptions, fc.Arbitrary<unknown>>> = {
  ttl: fc.oneof(
    anyValue.filter((v) => given(v) && !isTimerSeconds(v)),
    // Past what a timer can wait for: 10 years, say.
    fc.integer({ min: TIMER_SECONDS + 1, max: 10 * 365 * 86_400 }),
  ),
  lockTimeout: anyValue.filter((v) => given(v) && !isTimerSeconds(v)),
  maxHold: anyValue.filter((v) => given(v) && !isTimerSeconds(v)),
  onBusy: anyValue.filter((v) => given(v) && !['wait', 'skip', 'throw'].includes(v as string)),
  onRedisError: anyValue.filter((v) => given(v) && !['proceed', 'throw'].includes(v as string)),
  share: anyValue.filter((v) => given(v) && typeof v !== 'boolean'),
};
const NAMES = Object.keys(INVALID) as (keyof SingleFlightOptions)[];

/** Options with one invalid option (named), beside valid others. */
const invalidOptions: fc.Arbitrary<{ name: string; options: Record<string, unknown> }> = fc
  .constantFrom(...NAMES, 'notAnOption')
  .chain((name) =>
    fc.record({
      name: fc.constant(name),
      bad: name === 'notAnOption' ? anyValue : INVALID[name as keyof SingleFlightOptions],
      onBusy: fc.constantFrom(undefined, 'wait', 'skip'),
    }),
  )
  .map(({ name, bad, onBusy }) => ({
    name,
    options: name === 'onBusy' ? { [name]: bad } : { onBusy, [name]: bad },
  }));

/** The config error `call` rejects with (or throws), or what it did instead. */
async function outcomeOf(call: () => unknown): Promise<unknown> {
  try {
    return { resolved: await call() };
  } catch (error) {
    return error;
  }
}

function expectRefusal(outcome: unknown, name: string): void {
  expect(outcome).toBeInstanceOf(BufferLockConfigError);
  const { violations } = outcome as BufferLockConfigError;
  expect(violations.map((v) => v.property)).toContain(name);
}

describe('an invalid per-call option', () => {
  it('run() rejects with a BufferLockConfigError naming it, and runs nothing', async () => {
    await fc.assert(
      fc.asyncProperty(invalidOptions, async ({ name, options }) => {
        let ran = 0;
        const call = (): unknown => engine.run('k', () => ++ran, options as SingleFlightOptions);
        const returned = (() => {
          try {
            return call();
          } catch (error) {
            return error;
          }
        })();
        // A rejection, never a throw.
        expect(returned).toBeInstanceOf(Promise);
        expectRefusal(await outcomeOf(() => returned), name);
        expect(ran).toBe(0);
      }),
      fuzzParameters(FILE, 200, 1),
    );
    expect(await admin.keys(`${NS}*`)).toEqual([]);
    expect(
      logger.lines.filter((line) => line.text.includes('without a cross-worker lock')),
    ).toEqual([]);
  });

  it('is refused on every call, not only the first: the same mistake is never run', async () => {
    let ran = 0;
    const tenYears = { ttl: 10 * 365 * 86_400 };
    for (let i = 0; i < 3; i++) {
      expectRefusal(await outcomeOf(() => engine.run('k', () => ++ran, tenYears)), 'ttl');
    }
    expect(ran).toBe(0);
  });

  it('runObservable() errors with a BufferLockConfigError naming it, and subscribes nothing', async () => {
    await fc.assert(
      fc.asyncProperty(invalidOptions, async ({ name, options }) => {
        let ran = 0;
        const stream = engine.runObservable('k', () => of(++ran), options as SingleFlightOptions);
        expectRefusal(await outcomeOf(() => firstValueFrom(stream)), name);
        expect(ran).toBe(0);
      }),
      fuzzParameters(FILE, 100, 2),
    );
  });

  it('@SingleFlight refuses it where the method is declared', async () => {
    await fc.assert(
      fc.asyncProperty(invalidOptions, async ({ name, options }) => {
        const declare = (): unknown => {
          class Jobs {
            @SingleFlight('job', options as SingleFlightOptions)
            run(): string {
              return 'ran';
            }
          }
          return Jobs;
        };
        expectRefusal(await outcomeOf(declare), name);
      }),
      fuzzParameters(FILE, 100, 3),
    );
  });

  it('getOrSet() rejects with a BufferLockConfigError naming it, and runs no factory', async () => {
    // The cache's own names for the lock's options (its `ttl` is the entry's).
    const cacheInvalid = fc.oneof(
      INVALID.ttl.map((bad) => ({ name: 'lockTtl', options: { lockTtl: bad } })),
      INVALID.lockTimeout.map((bad) => ({ name: 'lockTimeout', options: { lockTimeout: bad } })),
    );
    await fc.assert(
      fc.asyncProperty(cacheInvalid, async ({ name, options }) => {
        let ran = 0;
        const outcome = await outcomeOf(() => cache.getOrSet('k', () => ++ran, options as never));
        expectRefusal(outcome, name);
        expect(ran).toBe(0);
      }),
      fuzzParameters(FILE, 100, 4),
    );
  });

  it('acquire() answers redis_ttl_invalid for a ttl its rule refuses, and takes nothing', async () => {
    await fc.assert(
      fc.asyncProperty(INVALID.ttl, async (ttl) => {
        const [guard, error] = await lock.acquire('k', ttl as number);
        expect(guard).toBeUndefined();
        expect(error).toBeInstanceOf(LockError);
        expect(error?.code).toBe('redis_ttl_invalid');
      }),
      fuzzParameters(FILE, 100, 5),
    );
    expect(await admin.exists(lock.redisKey('k'))).toBe(0);
  });
});

describe('valid per-call options', () => {
  it('run as given, and the same values are one validation', async () => {
    const options = { ttl: 30, lockTimeout: 2, onBusy: 'wait', share: false } as const;
    expect(await engine.run('valid', () => 'built', options)).toBe('built');
    const first = engine.settingsFor({ ...options });
    expect(engine.settingsFor({ ...options })).toBe(first);
    expect(first).toMatchObject({ ttl: 30, lockTimeout: 2, onBusy: 'wait', share: false });
  });
});
