import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  claimKey,
  derivedKey,
  entryAndClaim,
  fenceKey,
  hashTag,
  keySlot,
  releaseChannel,
  resultKey,
  slotKey,
} from '../../lib/redis/keys.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';

// The slot maths is checked against Redis itself (CLUSTER KEYSLOT on a real cluster node);
// test/redis/cluster.spec.ts runs the scripts on the cluster.
let cluster: RedisCluster;
beforeAll(async () => {
  cluster = await startRedisCluster();
});
afterAll(() => cluster.stop());

const ROLES = ['result', 'fence'] as const;
const slotOf = async (key: string): Promise<number> =>
  Number(await cluster.node(0).cluster('KEYSLOT', key));

/** Lock keys of every shape: default, non-ASCII, with a hash tag (`{shop}…`), with stray braces. */
const lockKeys = fc.oneof(
  fc.string({ minLength: 1 }),
  fc.string({ minLength: 1, unit: 'binary' }),
  fc.string().map((s) => `buffer:lock:${s}`),
  fc.tuple(fc.string({ minLength: 1 }), fc.string()).map(([t, s]) => `{${t}}${s}`),
  fc
    .tuple(fc.string(), fc.constantFrom('{', '}', '{}', '}{', '{{'), fc.string())
    .map((p) => p.join('')),
  fc.tuple(fc.string(), fc.string(), fc.string()).map(([a, b, c]) => `${a}{}${b}}${c}`),
);

describe('Redis keys: hash slots as Redis computes them', () => {
  it('keySlot agrees with CLUSTER KEYSLOT for any key, braces and non-ASCII included', async () => {
    await fc.assert(
      fc.asyncProperty(lockKeys, async (key) => {
        expect(keySlot(key)).toBe(await slotOf(key));
      }),
      { numRuns: 300 },
    );
  });

  it('keySlot hashes a lone surrogate as the U+FFFD that reaches Redis', async () => {
    for (const key of ['a\ud800b', '\udc00', '{x\udfff}y', 'x{\ud83d}', '🐙{🔒}']) {
      expect(keySlot(key), JSON.stringify(key)).toBe(await slotOf(key));
    }
  });

  it('an empty first tag means the whole key, even with a "}" further on', async () => {
    // cluster-key-slot 1.1.x hashes the text up to the later "}" for these instead.
    const keys = ['{}x}', 'a{}b}c', '{} }', 'foo{}{bar}', 'buffer:lock:{}9a03}'];
    for (const key of keys) {
      expect(keySlot(key), key).toBe(await slotOf(key));
      for (const role of ROLES)
        expect(await slotOf(derivedKey(key, role)), key).toBe(await slotOf(key));
    }
  });

  it('hashTag follows the first "{" and the first "}" after it, and ignores an empty tag', () => {
    expect(hashTag('{user1000}.following')).toBe('user1000');
    expect(hashTag('foo{}{bar}')).toBeUndefined();
    expect(hashTag('foo{{bar}}zap')).toBe('{bar');
    expect(hashTag('foo{bar}{zap}')).toBe('bar');
    expect(hashTag('a}b{c')).toBeUndefined();
    expect(hashTag('buffer:lock:9a03')).toBeUndefined();
  });
});

describe('Redis keys: every derived key and channel is in the lock key’s slot', () => {
  it('the default lock key (namespace + md5) and its derived keys share a slot in Redis', async () => {
    const lock = new RedisLockService({ redis: () => cluster.client() });
    const key = lock.redisKey('report:42');
    expect(resultKey(key)).toBe(`{${key}}:result`);
    expect(fenceKey(key)).toBe(`{${key}}:fence`);
    expect(releaseChannel(key)).toBe(key);
    const slot = await slotOf(key);
    for (const role of ROLES) expect(await slotOf(derivedKey(key, role))).toBe(slot);
  });

  it('a lock key with a hash tag keeps its tag', async () => {
    expect(resultKey('{shop}9a03')).toBe('{shop}{shop}9a03:result');
    expect(await slotOf('{shop}9a03:anything')).toBe(await slotOf(resultKey('{shop}9a03')));
  });

  it('any lock key, even one with unusable braces, shares its slot with its derived keys', async () => {
    await fc.assert(
      fc.asyncProperty(lockKeys, fc.constantFrom(...ROLES), async (key, role) => {
        expect(await slotOf(derivedKey(key, role))).toBe(await slotOf(key));
      }),
      { numRuns: 300 },
    );
  });
});

describe("Redis keys: a cache entry's key names its lock's claim", () => {
  it('the claim made from an entry key is the claimKey of its lock, for any lock key and prefix', () => {
    fc.assert(
      fc.property(lockKeys, fc.string(), (key, prefix) => {
        const entry = slotKey(key, prefix);
        expect(entryAndClaim(entry, prefix)).toEqual({ key: entry, claim: claimKey(key) });
      }),
      { numRuns: 2000 },
    );
  });
});

describe('Redis keys: distinct lock keys never share a derived key', () => {
  it('derivedKey is one-to-one, also across the three key shapes', () => {
    // The pairs a naive `{K}:role` / `K:role` layout would merge.
    const tricky = ['abc', '{abc}', '{abc}abc', 'a{b', '{0}a{b', '{}', '{}:result'];
    const derived = tricky.map((k) => resultKey(k));
    expect(new Set(derived).size).toBe(tricky.length);
    fc.assert(
      fc.property(lockKeys, lockKeys, fc.constantFrom(...ROLES), (a, b, role) => {
        fc.pre(a !== b);
        expect(derivedKey(a, role)).not.toBe(derivedKey(b, role));
      }),
      { numRuns: 2000 },
    );
  });
});
