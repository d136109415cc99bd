import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { rkey } from './lock-helpers.js';

const NS = 'encoding-spec:';
let server: RedisServer;
let admin: Redis;
let lock: RedisLockService;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
});
afterAll(() => server.stop());

const ONE_MB = 1024 * 1024;
const KEYS: readonly [string, string][] = [
  ['plain ASCII', 'report:2026-11'],
  ['accented (precomposed é)', 'café crème'],
  ['accented (e + combining acute)', 'cafe\u0301 cre\u0300me'],
  ['CJK', '日本語のキー'],
  ['emoji', '🔒🚀'],
  ['emoji ZWJ sequence', '👨‍👩‍👧‍👦'],
  ['the empty string', ''],
  ['control characters', 'a\u0000b\nc'],
  ['1 MB of ASCII', 'k'.repeat(ONE_MB)],
  ['1 MB of 3-byte characters', '語'.repeat(ONE_MB / 3)],
];

describe('encoding: any Unicode in keys, namespace and messages', () => {
  describe('keys: the Redis key is namespace + md5 hex of the UTF-8 bytes', () => {
    it.each([
      ['', 'd41d8cd98f00b204e9800998ecf8427e'],
      ['café', '07117fe4a1ebd544965dc19573183da2'],
      ['日本語のキー', '1c0359a937628ffd812d31d8042778b9'],
      ['🔒🚀', 'bf5516c5283daaa152b971e1c93e7b78'],
    ])('%j hashes to the known digest %s of its UTF-8 bytes', async (key, digest) => {
      const [guard] = await lock.acquire(key);
      expect(guard!.key).toBe(`${NS}${digest}`);
      await lock.release(guard!);
    });

    it.each(KEYS)(
      '%s: the key node:crypto gives, ASCII only, holding the token',
      async (_, key) => {
        const [guard, error] = await lock.acquire(key);
        expect(error).toBeUndefined();
        expect(guard!.key).toBe(rkey(NS, key));
        expect(guard!.key).toMatch(/^encoding-spec:[0-9a-f]{32}$/);
        expect(await admin.get(guard!.key)).toBe(guard!.token);
        expect(await lock.acquire(key)).toEqual([undefined, undefined]);
        expect(await lock.release(guard!)).toEqual([true, undefined]);
        expect(await admin.exists(guard!.key)).toBe(0);
      },
    );

    it('distinct keys do not collide: all of them can be held at once', async () => {
      const results = await Promise.all(KEYS.map(([, key]) => lock.acquire(key)));
      const guards = results.map(([guard]) => guard);
      expect(guards.every((g) => g !== undefined)).toBe(true);
      expect(new Set(guards.map((g) => g!.key)).size).toBe(KEYS.length);
      for (const guard of guards) expect(await admin.get(guard!.key)).toBe(guard!.token);
      await Promise.all(guards.map((g) => lock.release(g!)));
    });

    it("'\\uD800', '\\uDBFF' and '\\uFFFD' are three distinct locks, all held at once", async () => {
      const keys = ['\uD800', '\uDBFF', '\uFFFD', 'a\uDC00b', 'a\uFFFDb'];
      const results = await Promise.all(keys.map((key) => lock.acquire(key)));
      const guards = results.map(([guard, error]) => (expect(error).toBeUndefined(), guard!));
      expect(new Set(guards.map((g) => g.key)).size).toBe(keys.length);
      for (const guard of guards) expect(await admin.get(guard.key)).toBe(guard.token);
      // U+FFFD itself is well formed: its key is the md5 of its UTF-8 bytes, as before.
      expect(guards[2]!.key).toBe(rkey(NS, '\uFFFD'));
      expect(guards[0]!.key).not.toBe(rkey(NS, '\uFFFD'));
      expect(guards[0]!.key).toMatch(/^encoding-spec:[0-9a-f]{32}$/);
      await Promise.all(guards.map((g) => lock.release(g)));
    });

    it('a key with a lone surrogate hashes 0xFF then its UTF-16LE code units', async () => {
      const key = 'x\uD800y';
      const bytes = Buffer.concat([Buffer.from([0xff]), Buffer.from(key, 'utf16le')]);
      const [guard] = await lock.acquire(key);
      expect(guard!.key).toBe(NS + createHash('md5').update(bytes).digest('hex'));
      await lock.release(guard!);
    });

    it.each(KEYS.filter(([name]) => !name.startsWith('1 MB')))(
      'a well-formed key keeps its key: %s is the md5 of its UTF-8 bytes',
      (_name, key) => {
        expect(lock.redisKey(key)).toBe(rkey(NS, key));
      },
    );
  });

  describe('namespace: sent to Redis as part of the key', () => {
    it('a non-ASCII namespace reaches Redis as its UTF-8 bytes', async () => {
      const ns = 'ñandú:';
      const other = new RedisLockService({ redis: () => server.client(), namespace: ns });
      const [guard] = await other.acquire('k');
      const keys = await admin.keysBuffer(`${ns}*`);
      expect(keys.map((k) => k.toString('utf8'))).toEqual([guard!.key]);
      expect(keys[0]!.subarray(0, Buffer.byteLength(ns))).toEqual(Buffer.from(ns, 'utf8'));
      await other.release(guard!);
    });
  });

  describe('messages: override texts may hold any characters, including emoji', () => {
    it('an emoji override comes back unchanged, with the ERROR text from the client', async () => {
      const texts = { redis_lock_failed: '🔒💥 ロック失敗 — ERROR 🙈', redis_no_client: '🏭❌' };
      const broken = new RedisLockService({
        redis: () => undefined,
        namespace: NS,
        messages: texts,
      });
      const [, error] = await broken.acquire('🔑');
      expect(error!.message).toBe('🔒💥 ロック失敗 — 🏭❌ 🙈');
      expect(Buffer.from(error!.message, 'utf8').toString('utf8')).toBe(error!.message);
    });
  });
});
