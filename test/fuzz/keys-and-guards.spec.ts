import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  RedisLockService,
  SingleFlightEngine,
  type LockGuard,
} from '../../lib/index.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  anyKey,
  anyValue,
  fuzzParameters,
  notCatalogError,
  notTuple,
  throwingGetter,
  throwingProxy,
  within,
} from './fuzz.js';

/**
 * Keys of every kind (all of Unicode, lone surrogates, empty, 1 MB, no string at all) and guards
 * of every kind (forged, of another namespace, hostile objects, frozen, without prototype) against
 * a real Redis: every call settles with a tuple or a catalog error, a real guard works in any
 * wrapping, and no forged guard touches another holder's lock or a key outside the namespace.
 */

const FILE = 'test/fuzz/keys-and-guards.spec.ts';
const NS = 'fuzz:keys:';
const BOUND_MS = 3000;
const escaped = collectEscapes();
let server: RedisServer;
let admin: Redis;
let lock: RedisLockService;
let engine: SingleFlightEngine;
let cache: BufferCache;
const silent = { log() {}, warn() {}, error() {} };

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  const client = server.client();
  await client.ping();
  lock = new RedisLockService({ redis: client, namespace: NS, ttl: 5 });
  engine = new SingleFlightEngine({ lock, options: { logger: silent, lockTimeout: 1 } });
  cache = new BufferCache({ lock, engine, options: { logger: silent } });
});
afterAll(async () => {
  engine.close();
  await server.stop();
});

let serial = 0;

describe('keys of every kind', () => {
  it('acquire takes every string as a key of its own lock and refuses everything else by code', async () => {
    await fc.assert(
      fc.asyncProperty(anyKey, async (key) => {
        const outcome = await within(BOUND_MS, () => lock.acquire(key as string));
        expect(outcome).toMatchObject({ settled: true, ok: true });
        const result = (outcome as { value: unknown }).value;
        expect(notTuple(result)).toBeUndefined();
        const [guard, error] = result as [LockGuard | undefined, { code: string } | undefined];
        if (typeof key !== 'string') {
          expect(guard).toBeUndefined();
          expect(error?.code).toBe(
            key === undefined || key === null ? 'lock_key_undefined' : 'lock_key_invalid',
          );
          return;
        }
        expect(error).toBeUndefined();
        expect(guard?.key).toBe(lock.redisKey(key));
        expect(await admin.get(guard!.key)).toBe(guard!.token);
        expect(await within(BOUND_MS, () => lock.release(guard!))).toMatchObject({
          value: [true, undefined],
        });
        expect(await admin.exists(guard!.key)).toBe(0);
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 60),
    );
    await settle();
    expect(escaped).toEqual([]);
  });

  it('two different strings never share a lock, lone surrogates included', () => {
    const unit = fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c));
    const text = fc.oneof(fc.string({ unit: 'binary' }), fc.string({ unit }));
    fc.assert(
      fc.property(text, text, (a, b) => {
        fc.pre(a !== b);
        expect(lock.redisKey(a)).not.toBe(lock.redisKey(b));
        expect(lock.redisKey(a).startsWith(NS)).toBe(true);
      }),
      fuzzParameters(FILE, 500),
    );
  });

  it('engine.run and cache.getOrSet give the work its own value, or a catalog error, for every key', async () => {
    await fc.assert(
      fc.asyncProperty(anyKey, fc.integer(), async (key, value) => {
        const unique = typeof key === 'string' ? `${key}:${++serial}` : key;
        const ran = await within(BOUND_MS, () => engine.run(unique as string, () => value));
        expect(ran.settled).toBe(true);
        if (ran.settled && !ran.ok) expect(notCatalogError(ran.error)).toBeUndefined();
        if (ran.settled && ran.ok) expect(ran.value).toBe(value);
        const cached = await within(BOUND_MS, () => cache.getOrSet(unique as string, () => value));
        expect(cached.settled).toBe(true);
        if (cached.settled && !cached.ok) {
          expect(notCatalogError(cached.error)).toBeUndefined();
          expect(typeof unique === 'string' && unique !== '').toBe(false);
        }
        if (cached.settled && cached.ok) expect(cached.value).toBe(value);
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 40),
    );
    await settle();
    expect(escaped).toEqual([]);
  });
});

/** How a guard handed to release or extend is made from a real one. */
type GuardForm =
  | { readonly kind: 'real' | 'frozen' | 'null-prototype' | 'copy' }
  | { readonly kind: 'forged-token'; readonly token: string }
  | { readonly kind: 'foreign-key' }
  | { readonly kind: 'other-namespace' }
  | { readonly kind: 'hostile'; readonly value: unknown };

const guardForm: fc.Arbitrary<GuardForm> = fc.oneof(
  fc.constantFrom<GuardForm>(
    { kind: 'real' },
    { kind: 'frozen' },
    { kind: 'null-prototype' },
    { kind: 'copy' },
    { kind: 'foreign-key' },
    { kind: 'other-namespace' },
  ),
  fc.string().map((token): GuardForm => ({ kind: 'forged-token', token })),
  fc
    .oneof(
      anyValue,
      fc.constantFrom('key', 'token').map(throwingGetter),
      fc.constant(null).map(throwingProxy),
      fc.record({ key: anyValue, token: anyValue }),
    )
    .map((value): GuardForm => ({ kind: 'hostile', value })),
);

describe('guards of every kind', () => {
  it('release and extend honour a real guard in any wrapping and touch nothing a forged one names', async () => {
    const other = new RedisLockService({
      redis: () => server.client(),
      namespace: 'fuzz:other:',
      ttl: 5,
    });
    await admin.set('fuzz:data', 'precious');
    await fc.assert(
      fc.asyncProperty(guardForm, fc.boolean(), async (form, extend) => {
        const [held] = await lock.acquire(`guarded:${++serial}`);
        const [foreign] = await other.acquire(`guarded:${serial}`);
        expect(held && foreign).toBeTruthy();
        const guard = ((): unknown => {
          switch (form.kind) {
            case 'real':
              return held;
            case 'frozen':
              return Object.freeze({ ...held });
            case 'null-prototype':
              return Object.assign(Object.create(null) as object, held);
            case 'copy':
              return JSON.parse(JSON.stringify(held)) as unknown;
            case 'forged-token':
              return { key: held!.key, token: form.token };
            case 'foreign-key':
              return { key: 'fuzz:data', token: 'precious' };
            case 'other-namespace':
              return foreign;
            case 'hostile':
              return form.value;
          }
        })();
        const genuine = ['real', 'frozen', 'null-prototype', 'copy'].includes(form.kind);
        const call = (): Promise<unknown> =>
          extend ? lock.extend(guard as LockGuard, 60) : lock.release(guard as LockGuard);
        const outcome = await within(BOUND_MS, call);
        expect(outcome).toMatchObject({ settled: true, ok: true });
        const result = (outcome as { value: unknown }).value;
        expect(notTuple(result)).toBeUndefined();
        const [done, error] = result as [boolean, { code: string } | undefined];
        const sameToken =
          form.kind === 'forged-token' && form.token === held!.token ? true : genuine;
        if (sameToken) {
          expect([done, error]).toEqual([true, undefined]);
        } else if (form.kind === 'forged-token') {
          // Another token for the held key: release "succeeds" without deleting; extend says no.
          expect(error).toBeUndefined();
          expect(done).toBe(!extend);
        } else {
          expect([done, error?.code]).toEqual([false, 'redis_invalid_guard']);
        }
        // What a guard does not hold stays as it is.
        if (!sameToken) {
          expect(await admin.get(held!.key)).toBe(held!.token);
          expect(await admin.pttl(held!.key)).toBeLessThanOrEqual(5000);
        } else if (!extend) {
          expect(await admin.exists(held!.key)).toBe(0);
        }
        expect(await admin.get(foreign!.key)).toBe(foreign!.token);
        expect(await admin.pttl(foreign!.key)).toBeLessThanOrEqual(5000);
        expect(await admin.get('fuzz:data')).toBe('precious');
        await lock.release(held!);
        await other.release(foreign!);
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 80),
    );
    await settle();
    expect(escaped).toEqual([]);
  });
});
