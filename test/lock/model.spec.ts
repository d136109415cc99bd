import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, type LockGuard } from '../../lib/index.js';
import { toMilliseconds } from '../../lib/options/seconds.js';
import { LockModel, timed, type Interval } from '../support/lock-model.js';
import {
  BACKENDS,
  inspectorFor,
  type ClientFamily,
  type KeyInspector,
} from '../support/client-families.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { sleep } from './lock-helpers.js';

let server: RedisServer;

beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const WORKERS = 3;
const KEYS = ['a', '🔑'] as const;
/** Around an expiry, this much on either side counts as "too close to call". */
const MARGIN_MS = 60;

type Command =
  | { readonly kind: 'acquire'; readonly worker: number; readonly key: string }
  | {
      readonly kind: 'release';
      readonly worker: number;
      readonly key: string;
      /**
       * Which guard ever issued for the key (guards are plain data; any worker may hand one in):
       * the newest, or the one at `pick` (modulo their count), likely stale.
       */
      readonly newest: boolean;
      readonly pick: number;
    }
  | { readonly kind: 'wait'; readonly ms: number };

const worker = fc.integer({ min: 0, max: WORKERS - 1 });
const key = fc.constantFrom(...KEYS);
const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('acquire' as const), worker, key }) },
  {
    weight: 3,
    arbitrary: fc.record({
      kind: fc.constant('release' as const),
      worker,
      key,
      newest: fc.boolean(),
      pick: fc.nat(),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('wait' as const),
      ms: fc.integer({ min: 20, max: 300 }),
    }),
  },
);
/** Seconds each worker's locks live: short, so that expiry happens within a run. */
const ttls = fc.array(fc.constantFrom(0.15, 0.2, 0.3), { minLength: WORKERS, maxLength: WORKERS });

/** How many results were checked against the model, and how many were too close to an expiry. */
interface Tally {
  checked: number;
  uncertain: number;
  runs: number;
  expirations: number;
  busy: number;
  stale: number;
}

/** Runs one scenario with a client of `family` per worker, counting into `tally`. */
async function runScenario(
  family: ClientFamily,
  tally: Tally,
  ttl: readonly number[],
  commands: readonly Command[],
): Promise<void> {
  const namespace = `model-spec:${family.name}:${++tally.runs}:`;
  const services = ttl.map(
    (t) => new RedisLockService({ redis: () => family.connect(server), namespace, ttl: t }),
  );
  try {
    await runSteps(services, inspectorFor(family, server), tally, ttl, commands);
  } finally {
    await family.closeAll();
  }
}

async function runSteps(
  services: readonly RedisLockService[],
  keys: KeyInspector,
  tally: Tally,
  ttl: readonly number[],
  commands: readonly Command[],
): Promise<void> {
  const guards = new Map<string, LockGuard[]>(KEYS.map((k) => [k, []]));
  const issued = new Set<string>();
  const model = new LockModel(MARGIN_MS);
  const rkeys = KEYS.map((k) => services[0]!.redisKey(k));

  const resync = async (rkey: string): Promise<void> => {
    const [[value, pttl], at] = await timed(() => Promise.all([keys.get(rkey), keys.pttl(rkey)]));
    model.resync(rkey, value, pttl, at);
  };
  const settle = async (rkey: string, at: Interval, check: () => void): Promise<void> => {
    if (model.state(rkey, at) === 'uncertain') {
      tally.uncertain++;
      await resync(rkey);
    } else {
      check();
      tally.checked++;
    }
  };

  for (const step of commands) {
    if (step.kind === 'wait') {
      await sleep(step.ms);
    } else if (step.kind === 'acquire') {
      const lock = services[step.worker]!;
      const rkey = lock.redisKey(step.key);
      const before = model.state(rkey, { start: performance.now(), end: performance.now() });
      const [[guard, error], at] = await timed(() => lock.acquire(step.key));
      expect(error).toBeUndefined();
      if (guard) {
        expect(guard.key).toBe(rkey);
        expect(issued.has(guard.token)).toBe(false); // token is fresh
        issued.add(guard.token);
        guards.get(step.key)!.push(guard);
      }
      const state = model.state(rkey, at);
      if (state === 'uncertain' || before === 'uncertain') {
        tally.uncertain++;
        if (guard) model.acquired(rkey, guard.token, at, toMilliseconds(ttl[step.worker]!));
        else await resync(rkey);
      } else {
        // r ∉ dom store ⇒ the guard; r ∈ dom store ⇒ busy, from any worker, the holder too.
        expect(guard !== undefined).toBe(state === 'free');
        if (!guard) tally.busy++;
        if (guard) model.acquired(rkey, guard.token, at, toMilliseconds(ttl[step.worker]!));
        tally.checked++;
      }
    } else {
      const lock = services[step.worker]!;
      const issuedForKey = guards.get(step.key)!;
      const guard = step.newest
        ? issuedForKey.at(-1)
        : issuedForKey[step.pick % Math.max(1, issuedForKey.length)];
      if (!guard) {
        // guard? = ⊥ ⇒ store′ = store ∧ ok! = false ∧ error! ≠ ⊥
        const [ok, error] = await lock.release(guard as unknown as LockGuard);
        expect([ok, error?.code]).toEqual([false, 'redis_invalid_guard']);
        continue;
      }
      const ours = model.token(guard.key) === guard.token;
      if (!ours) tally.stale++;
      const [result, at] = await timed(() => lock.release(guard));
      // ok! = true whether the token matched, differed, or the key was gone.
      expect(result).toEqual([true, undefined]);
      if (ours) {
        // Deleted by us or expired on its own: either way the key is gone now.
        model.deleted(guard.key);
        tally.checked++;
      } else {
        await settle(guard.key, at, () => undefined);
      }
    }
    // After every step, Redis holds exactly what the model says wherever the model is sure.
    for (const rkey of rkeys) {
      const [value, at] = await timed(() => keys.get(rkey));
      await settle(rkey, at, () => {
        expect(value).toBe(model.state(rkey, at) === 'held' ? model.token(rkey)! : null);
      });
    }
  }
  tally.expirations += model.expirations;
}

describe.each(BACKENDS)(
  'the lock through $name against a model: random acquires, releases and expiries by several workers',
  (family) => {
    it('every result agrees with the model (acquire, release, expiry)', async () => {
      const tally: Tally = { checked: 0, uncertain: 0, runs: 0, expirations: 0, busy: 0, stale: 0 };
      await fc.assert(
        fc.asyncProperty(
          ttls,
          fc.array(command, { minLength: 4, maxLength: 16 }),
          (ttl, commands) => runScenario(family, tally, ttl, commands),
        ),
        { numRuns: 30 },
      );
      // Not vacuous: most results were checked, not skipped as too close to an expiry.
      expect(tally.checked).toBeGreaterThan(tally.uncertain * 2);
      // Every kind of step happened: busy answers, expiries, and releases of stale or foreign guards.
      expect(tally.busy).toBeGreaterThan(0);
      expect(tally.expirations).toBeGreaterThan(0);
      expect(tally.stale).toBeGreaterThan(0);
    }, 120_000);
  },
);
