import fc from 'fast-check';
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  RedisLockService,
  SingleFlightEngine,
  type LockGuard,
} from '../../lib/index.js';
import { fenceKey, resultKey, slotKey } from '../../lib/redis/keys.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { fuzzParameters, notTuple } from './fuzz.js';

/**
 * Forged guards against real locks of namespaces that are prefixes of one another (`shop`,
 * `shop2`, `shop:`), with the built-in `key()` and a hash-tag subclass, fencing on: a guard
 * naming a fence counter, a shared result, a cache entry (any `cachePrefix`, one that starts with
 * the namespace among them) or a lock of another namespace, with a random token or the key's own
 * value, is `redis_invalid_guard` for release and extend, and the key keeps its value and expiry.
 */

const FILE = 'test/fuzz/forged-guards.spec.ts';
const TTL = 30;
const escaped = collectEscapes();
const silent = { log() {}, warn() {}, error() {} };
let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

/** The documented hash-tag subclass: the namespace as the tag, then the key's MD5. */
class TaggedLock extends RedisLockService {
  protected override key(cacheKey: string): string {
    return `{${this.namespace}}${createHash('md5').update(cacheKey).digest('hex')}`;
  }
}

/**
 * Whether `key` holds `namespace` where an overridden `key()` must put it (at the start, or in or
 * right after a leading hash tag): all the service can check when `key()` is overridden.
 */
const holdsNamespace = (key: string, namespace: string): boolean =>
  key.startsWith(namespace) ||
  key.startsWith(`{${namespace}`) ||
  (key.startsWith('{') && key.slice(key.indexOf('}') + 1).startsWith(namespace));

/** One service of the run, with what it left in Redis. */
interface Service {
  readonly lock: RedisLockService;
  readonly tagged: boolean;
  readonly namespace: string;
  /** Keys a guard of this service must never be honoured for, and what they are. */
  readonly derived: { key: string; kind: 'fence' | 'result' | 'entry' | 'prefixed' }[];
  /** A lock it holds (for other services to forge). */
  held: LockGuard;
  /** The fencing number of its last acquire of `cacheKey`. */
  fence: number;
  readonly cacheKey: string;
}

const noBraces = fc.string({ maxLength: 12 }).map((s) => s.replaceAll(/[{}]/g, ''));
const base = fc.stringMatching(/^[a-z][a-z0-9]{0,5}$/);

interface Case {
  readonly base: string;
  /** Per service: the cachePrefix: '' (none), its namespace, namespace + text, or other text. */
  readonly prefixes: readonly {
    readonly kind: 'none' | 'ns' | 'ns+' | 'other';
    readonly text: string;
  }[];
  readonly cacheKeys: readonly string[];
  readonly tokens: readonly string[];
  readonly forgedTtl: number;
}

const prefix = fc.record({
  kind: fc.constantFrom('none' as const, 'ns' as const, 'ns+' as const, 'other' as const),
  text: noBraces,
});

const caseArbitrary: fc.Arbitrary<Case> = fc.record({
  base,
  prefixes: fc.array(prefix, { minLength: 6, maxLength: 6 }),
  cacheKeys: fc.array(fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }), {
    minLength: 6,
    maxLength: 6,
  }),
  tokens: fc.array(fc.string({ maxLength: 40 }), { minLength: 1, maxLength: 3 }),
  forgedTtl: fc.constantFrom(0.5, 1, 3600, 86_400),
});

let run = 0;
const figures = {
  runs: 0,
  forgeries: 0,
  byKind: { fence: 0, result: 0, entry: 0, prefixed: 0, lock: 0 },
  withActualValue: 0,
  keysWatched: 0,
  leftOutOtherNamespace: 0,
};

describe('forged guards for derived keys, cache entries and other namespaces', () => {
  it('are redis_invalid_guard for release and extend, and leave every key as it was', async () => {
    await fc.assert(
      fc.asyncProperty(caseArbitrary, async (c) => {
        run++;
        const family = [`f${run}_${c.base}`, `f${run}_${c.base}2`, `f${run}_${c.base}:`];
        const services: Service[] = [];
        // Closed once their locks are done with: closing an engine closes its lock.
        const engines: SingleFlightEngine[] = [];
        let index = 0;
        for (const namespace of family) {
          for (const Lock of [RedisLockService, TaggedLock]) {
            const p = c.prefixes[index]!;
            const cachePrefix =
              p.kind === 'none'
                ? ''
                : p.kind === 'ns'
                  ? namespace
                  : p.kind === 'ns+'
                    ? `${namespace}${p.text}`
                    : p.text;
            const cacheKey = c.cacheKeys[index++]!;
            const lock = new Lock({ redis: server.client(), namespace, fencing: true, ttl: TTL });
            const engine = new SingleFlightEngine({ lock, options: { logger: silent } });
            const cache = new BufferCache({
              lock,
              engine,
              options: { logger: silent, cachePrefix },
            });
            // A fence counter, a shared result and a cache entry, all written by the library.
            const [first] = await lock.acquire(cacheKey);
            expect(await lock.release(first!)).toEqual([true, undefined]);
            expect(await engine.run(`${cacheKey}:shared`, () => 'shared', { share: true })).toBe(
              'shared',
            );
            expect(await cache.getOrSet(cacheKey, () => ({ built: index }), { ttl: 60 })).toEqual({
              built: index,
            });
            engines.push(engine);
            const [held] = await lock.acquire(`${cacheKey}:held`);
            const lockKey = lock.redisKey(cacheKey);
            const sharedKey = lock.redisKey(`${cacheKey}:shared`);
            // The cache stores a key that starts with NUL with a second one (URL keys live apart).
            const entryLockKey = lock.redisKey(
              cacheKey.startsWith('\0') ? `\0${cacheKey}` : cacheKey,
            );
            const derived: Service['derived'] = [
              { key: fenceKey(lockKey), kind: 'fence' },
              { key: fenceKey(held!.key), kind: 'fence' },
              { key: resultKey(sharedKey), kind: 'result' },
              { key: resultKey(lockKey), kind: 'result' },
              { key: slotKey(entryLockKey, cachePrefix), kind: 'entry' },
            ];
            // A role key under the cache prefix (with none, it is the fence or result above).
            if (cachePrefix !== '') {
              derived.push(
                { key: slotKey(entryLockKey, cachePrefix, 'result'), kind: 'prefixed' },
                { key: slotKey(entryLockKey, cachePrefix, 'fence'), kind: 'prefixed' },
              );
            }
            services.push({
              lock,
              tagged: Lock === TaggedLock,
              namespace,
              derived,
              held: held!,
              fence: first!.fence!,
              cacheKey,
            });
          }
        }
        // The library wrote these; the rest (a result never shared, a prefixed role key) are
        // planted, so that every forged key has a value to keep.
        for (const { derived } of services) {
          for (const { key, kind } of derived.slice(0, 3).concat(derived[4]!)) {
            expect(await admin.exists(key), `${kind} ${key}`).toBe(1);
          }
          for (const { key } of derived) {
            await admin.set(key, `planted:${key}`, 'PX', 60_000, 'NX');
          }
        }

        const watched = new Map<string, { value: string | null; pttl: number }>();
        const watch = async (key: string): Promise<void> => {
          watched.set(key, { value: await admin.get(key), pttl: await admin.pttl(key) });
        };
        for (const s of services) {
          for (const { key } of s.derived) await watch(key);
          await watch(s.held.key);
        }

        for (const s of services) {
          const targets: { key: string; kind: keyof typeof figures.byKind }[] = [];
          for (const other of services) {
            for (const { key, kind } of other.derived) {
              targets.push({ key, kind });
            }
            if (other === s) continue;
            // The documented limitation: with key() overridden, a lock of another namespace that
            // starts with this one (or of this namespace in the built-in form) cannot be told
            // apart from one of this service. Only that combination is left out.
            if (s.tagged && holdsNamespace(other.held.key, s.namespace)) {
              figures.leftOutOtherNamespace++;
              continue;
            }
            targets.push({ key: other.held.key, kind: 'lock' });
          }
          for (const { key, kind } of targets) {
            const actual = await admin.get(key);
            expect(actual, key).not.toBeNull();
            for (const token of [...c.tokens, actual!]) {
              if (token === actual) figures.withActualValue++;
              const guard: LockGuard = { key, token };
              for (const result of [
                await s.lock.release(guard),
                await s.lock.extend(guard, c.forgedTtl),
              ]) {
                figures.forgeries++;
                figures.byKind[kind]++;
                expect(notTuple(result)).toBeUndefined();
                const [done, error] = result;
                expect(
                  [done, error?.code],
                  `${s.tagged ? 'tagged' : 'built-in'} ${s.namespace} forging ${key}`,
                ).toEqual([false, 'redis_invalid_guard']);
              }
            }
          }
        }

        // Every key keeps its value; its expiry only ran down, never moved to the forged ttl.
        for (const [key, before] of watched) {
          figures.keysWatched++;
          expect(await admin.get(key), key).toBe(before.value);
          const pttl = await admin.pttl(key);
          expect(pttl, key).toBeLessThanOrEqual(before.pttl);
          expect(pttl, key).toBeGreaterThan(before.pttl - 5000);
        }
        // Fencing numbers still increase, and each held lock is still its holder's to release.
        for (const s of services) {
          const [next] = await s.lock.acquire(s.cacheKey);
          expect(next!.fence!).toBeGreaterThan(s.fence);
          expect(await s.lock.release(next!)).toEqual([true, undefined]);
          expect(await s.lock.release(s.held)).toEqual([true, undefined]);
          expect(await admin.exists(s.held.key)).toBe(0);
        }
        await Promise.all(engines.map((engine) => engine.close()));
        figures.runs++;
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 30),
    );
    console.log('forged guards fuzz', figures);
    // Each kind of key was forged, with its own value as the token too.
    for (const count of Object.values(figures.byKind)) expect(count).toBeGreaterThan(0);
    expect(figures.withActualValue).toBeGreaterThan(0);
    await settle();
    expect(escaped).toEqual([]);
  });
});
