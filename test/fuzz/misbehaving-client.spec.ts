import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  BufferCache,
  RedisLockService,
  SingleFlightEngine,
  type LockGuard,
  type RedisClientFactory,
  type RedisScriptClient,
} from '../../lib/index.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { anyValue, drain, fuzzParameters, notCatalogError, notTuple, within } from './fuzz.js';
import {
  clientShape,
  garbageClient,
  reply,
  type ClientShape,
  type Reply,
} from './garbage-client.js';

/**
 * A client that answers garbage (any value, a throw, a rejection, a late answer, a thenable that
 * throws or calls back twice, a command that only its commandTimeout ends) and a factory that
 * gives one late, never, or not at all: every call of the lock, the engine and the cache settles
 * within its bound with a tuple, a value or a catalog error, and nothing escapes.
 */

const FILE = 'test/fuzz/misbehaving-client.spec.ts';
const NS = 'fuzz:garbage:';
const escaped = collectEscapes();
const silent = { log() {}, warn() {}, error() {} };

/** The service's connect deadline (seconds) and the fake client's command timeout (ms). */
const CONNECT_TIMEOUT_S = 0.05;
const COMMAND_TIMEOUT_MS = 30;
/** A lock call: the connect deadline, up to two commands (EVALSHA, then EVAL), a late answer each. */
const LOCK_BOUND_MS = CONNECT_TIMEOUT_S * 1000 + 2 * (COMMAND_TIMEOUT_MS + 40) + 800;
/** An engine or cache call: the lock calls of a wait of lockTimeout, its release, and the above. */
const LOCK_TIMEOUT_S = 0.1;
const FLIGHT_BOUND_MS = LOCK_TIMEOUT_S * 1000 + 4 * LOCK_BOUND_MS;
// close() ends within the lock's shutdownTimeout (5 s by default) + 1 s.
const SHUTDOWN_BOUND_MS = 6000;

/** How the service reaches the client. */
type Connect = 'object' | 'factory' | 'late-factory' | 'never-factory' | 'rejecting-factory';
const connect = fc.constantFrom<Connect>(
  'object',
  'factory',
  'late-factory',
  'never-factory',
  'rejecting-factory',
);

function redisOf(
  how: Connect,
  client: RedisScriptClient,
  made: unknown,
): RedisScriptClient | RedisClientFactory {
  switch (how) {
    case 'object':
      return client;
    case 'factory':
      return () => client;
    case 'late-factory':
      return () => new Promise((r) => setTimeout(() => r(client), 20));
    case 'never-factory':
      return () => new Promise(() => undefined);
    case 'rejecting-factory':
      return () => Promise.reject(made);
  }
}

const scenario = fc.record({
  shape: clientShape,
  replies: fc.array(reply, { minLength: 1, maxLength: 6 }),
  connect,
  made: anyValue,
  fencing: fc.boolean(),
});

interface Scenario {
  readonly shape: ClientShape;
  readonly replies: Reply[];
  readonly connect: Connect;
  readonly made: unknown;
  readonly fencing: boolean;
}

function serviceFor(s: Scenario) {
  const fake = garbageClient(s.shape, s.replies, COMMAND_TIMEOUT_MS);
  const lock = new RedisLockService({
    redis: redisOf(s.connect, fake.client as unknown as RedisScriptClient, s.made),
    namespace: NS,
    ttl: 0.6,
    fencing: s.fencing,
    connectTimeout: CONNECT_TIMEOUT_S,
  });
  return { fake, lock };
}

/** Why `outcome` is not a settled tuple with a catalog error, or `undefined`. */
function notSettledTuple(outcome: Awaited<ReturnType<typeof within>>): string | undefined {
  if (!outcome.settled) return 'did not settle within its bound';
  if (!outcome.ok) return `rejected: ${String(notCatalogError(outcome.error))}`;
  return notTuple(outcome.value);
}

const FORGED: LockGuard = { key: `${NS}forged`, token: 'f'.repeat(32) };

describe('a client that answers garbage', () => {
  it('acquire, release and extend settle within their bound, with a tuple and catalog errors', async () => {
    const op = fc.constantFrom('acquire' as const, 'release' as const, 'extend' as const);
    await fc.assert(
      fc.asyncProperty(scenario, fc.array(op, { minLength: 1, maxLength: 4 }), async (s, ops) => {
        // What escapes is counted for the run it escaped in (a late one may show up one run on).
        escaped.length = 0;
        const { fake, lock } = serviceFor(s);
        try {
          const calls = ops.map((name, i) =>
            within(LOCK_BOUND_MS, () =>
              name === 'acquire'
                ? lock.acquire(`k${i % 2}`)
                : name === 'release'
                  ? lock.release(FORGED)
                  : lock.extend(FORGED),
            ),
          );
          for (const outcome of await Promise.all(calls)) {
            expect(notSettledTuple(outcome)).toBeUndefined();
            const [guard] = (outcome as { value: [unknown, unknown] }).value;
            if (guard !== undefined && typeof guard === 'object') {
              const { key, token, fence } = guard as LockGuard;
              expect(key.startsWith(NS) && typeof token === 'string').toBe(true);
              if (s.fencing) expect(Number.isSafeInteger(fence) && fence! > 0).toBe(true);
            }
          }
          // A guard the garbage gave back is released like any other: within the bound.
          const acquired = await within(LOCK_BOUND_MS, () => lock.acquire('again'));
          expect(notSettledTuple(acquired)).toBeUndefined();
          const [guard] = (acquired as { value: [LockGuard | undefined, unknown] }).value;
          if (guard) {
            expect(notSettledTuple(await within(LOCK_BOUND_MS, () => lock.release(guard)))).toBe(
              undefined,
            );
          }
          await drain();
          expect(escaped).toEqual([]);
        } finally {
          fake.stop();
        }
      }),
      fuzzParameters(FILE, 100),
    );
    await settle();
    expect(escaped).toEqual([]);
  });

  it('engine.run settles within its bound with the work’s value, a skip or a catalog error, and close() leaves no listener', async () => {
    const options = fc.record({
      onBusy: fc.constantFrom('wait' as const, 'skip' as const, 'throw' as const),
      onRedisError: fc.constantFrom('proceed' as const, 'throw' as const),
      share: fc.boolean(),
      circuitBreaker: fc.oneof(
        fc.constant(false as const),
        fc.record({
          failureThreshold: fc.integer({ min: 1, max: 3 }),
          openSeconds: fc.constant(0.2),
          probes: fc.constant(1),
        }),
      ),
    });
    const runs = fc.array(fc.tuple(fc.constantFrom('a', 'b'), fc.integer(), fc.nat(20)), {
      minLength: 1,
      maxLength: 3,
    });
    await fc.assert(
      fc.asyncProperty(scenario, options, runs, async (s, given, calls) => {
        // What escapes is counted for the run it escaped in (a late one may show up one run on).
        escaped.length = 0;
        const { fake, lock } = serviceFor(s);
        const engine = new SingleFlightEngine({
          lock,
          options: { ...given, logger: silent, lockTimeout: LOCK_TIMEOUT_S },
        });
        try {
          const outcomes = await Promise.all(
            calls.map(([key, value, ms]) =>
              within(FLIGHT_BOUND_MS, () =>
                engine.run(key, () => new Promise<number>((r) => setTimeout(() => r(value), ms))),
              ),
            ),
          );
          outcomes.forEach((outcome, i) => {
            expect(outcome.settled).toBe(true);
            if (outcome.settled && !outcome.ok) {
              expect(notCatalogError(outcome.error)).toBeUndefined();
            } else if (outcome.settled && !given.share) {
              // Its own value, one of a joined flight of the same key, or a skip.
              const values = calls.filter(([k]) => k === calls[i]![0]).map(([, v]) => v);
              expect([...values, undefined]).toContain(outcome.value);
            }
          });
        } finally {
          expect((await within(SHUTDOWN_BOUND_MS, () => engine.close())).settled).toBe(true);
        }
        expect(fake.listeners()).toBe(0);
        fake.stop();
        await drain();
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 50),
    );
    await settle();
    expect(escaped).toEqual([]);
  });

  it('cache.getOrSet settles within its bound with the built value when the store answers garbage', async () => {
    await fc.assert(
      fc.asyncProperty(scenario, fc.integer(), async (s, value) => {
        // What escapes is counted for the run it escaped in (a late one may show up one run on).
        escaped.length = 0;
        const { fake, lock } = serviceFor(s);
        const engine = new SingleFlightEngine({
          lock,
          options: { logger: silent, lockTimeout: LOCK_TIMEOUT_S },
        });
        const cache = new BufferCache({
          lock,
          engine,
          options: {
            logger: silent,
            cacheDefaults: { lockTtl: 0.6, lockTimeout: LOCK_TIMEOUT_S },
          },
        });
        try {
          const outcome = await within(FLIGHT_BOUND_MS, () => cache.getOrSet('c', () => value));
          expect(outcome.settled).toBe(true);
          if (outcome.settled && !outcome.ok)
            expect(notCatalogError(outcome.error)).toBe(undefined);
          else if (outcome.settled) expect(outcome.value).toBe(value);
        } finally {
          engine.close();
        }
        fake.stop();
        await drain();
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 50),
    );
    await settle();
    expect(escaped).toEqual([]);
  });
});
