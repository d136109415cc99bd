import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { BufferCache, RedisLockService, type LockGuard } from '../../lib/index.js';
import { fenceKey, resultKey, slotKey } from '../../lib/redis/keys.js';
import type { RedisServer } from '../support/redis-server.js';
import { withRedisServer } from './lock-helpers.js';

/**
 * A guard is honoured only for a lock key the service makes: a forged guard naming a lock's fence
 * counter, its shared result, a cache entry, or a lock of another namespace that merely starts
 * with this one's is `redis_invalid_guard`, and Redis is not touched.
 */

let server: RedisServer;
let admin: Redis;
withRedisServer((s, a) => {
  server = s;
  admin = a;
});

const silent = { log() {}, warn() {}, error() {} };

/** The built-in key, and a subclass's `{ns}` + raw key, which the service cannot check as closely. */
class RawKeyLock extends RedisLockService {
  protected override key(cacheKey: string): string {
    return `{${this.namespace}}${cacheKey}`;
  }
}

const forge = (key: string): LockGuard => ({ key, token: '2' });

for (const Lock of [RedisLockService, RawKeyLock]) {
  describe(`a forged guard for a derived key (${Lock.name})`, () => {
    it("a lock's fence counter is neither extended nor deleted: the next fence is still higher", async () => {
      const lock = new Lock({
        redis: server.client(),
        namespace: `forge:${Lock.name}:`,
        fencing: true,
      });
      const [first] = await lock.acquire('k');
      expect(await lock.release(first!)).toEqual([true, undefined]);
      const fence = fenceKey(first!.key);
      expect(await admin.exists(fence)).toBe(1);
      const pttl = await admin.pttl(fence);

      const [extended, extendError] = await lock.extend(forge(fence), 0.5);
      expect([extended, extendError?.code]).toEqual([false, 'redis_invalid_guard']);
      const [released, releaseError] = await lock.release(forge(fence));
      expect([released, releaseError?.code]).toEqual([false, 'redis_invalid_guard']);

      expect(await admin.exists(fence)).toBe(1);
      // Not moved to the forged 500 ms: it runs down from where it was.
      const after = await admin.pttl(fence);
      expect(after).toBeLessThanOrEqual(pttl);
      expect(after).toBeGreaterThan(pttl - 5000);
      const [second] = await lock.acquire('k');
      expect(second!.fence).toBeGreaterThan(first!.fence!);
      await lock.release(second!);
    });

    it("a lock's shared result stays where it is", async () => {
      const lock = new Lock({ redis: server.client(), namespace: `forge:${Lock.name}:result:` });
      const result = resultKey(lock.redisKey('r'));
      await admin.set(result, '2', 'PX', 60_000);
      const [released, error] = await lock.release(forge(result));
      expect([released, error?.code]).toEqual([false, 'redis_invalid_guard']);
      expect(await admin.get(result)).toBe('2');
    });
  });
}

describe('a forged guard for a cache entry', () => {
  it('with a cache prefix that starts with the lock namespace, the entry stays', async () => {
    const namespace = 'forge:entries:';
    const lock = new RedisLockService({ redis: server.client(), namespace });
    const cache = new BufferCache({ lock, options: { logger: silent, cachePrefix: namespace } });
    await cache.set('page', { ok: true }, { ttl: 60 });
    const entry = slotKey(lock.redisKey('page'), namespace);
    expect(await admin.exists(entry)).toBe(1);
    for (const guard of [forge(entry), { key: entry, token: (await admin.get(entry))! }]) {
      const [released, error] = await lock.release(guard);
      expect([released, error?.code]).toEqual([false, 'redis_invalid_guard']);
    }
    expect(await cache.get('page')).toEqual({ ok: true });
  });
});

describe('a forged guard for a cache entry of a hash-tag subclass', () => {
  it("with cachePrefix '' the entry's own text as token neither extends nor deletes it", async () => {
    const lock = new RawKeyLock({ redis: server.client(), namespace: 'forge:tagged:' });
    const cache = new BufferCache({ lock, options: { logger: silent, cachePrefix: '' } });
    await cache.set('page', { ok: true }, { ttl: 60 });
    const entry = slotKey(lock.redisKey('page'), '');
    const guard = { key: entry, token: (await admin.get(entry))! };
    const pttl = await admin.pttl(entry);
    const [extended, extendError] = await lock.extend(guard, 99_999);
    expect([extended, extendError?.code]).toEqual([false, 'redis_invalid_guard']);
    const [released, releaseError] = await lock.release(guard);
    expect([released, releaseError?.code]).toEqual([false, 'redis_invalid_guard']);
    expect(await admin.pttl(entry)).toBeLessThanOrEqual(pttl);
    expect(await cache.get('page')).toEqual({ ok: true });
  });
});

describe('a guard of another namespace that starts with this one', () => {
  it("service 'shop' cannot release or extend a lock of service 'shop2'", async () => {
    const shop = new RedisLockService({ redis: server.client(), namespace: 'shop' });
    const shop2 = new RedisLockService({ redis: server.client(), namespace: 'shop2' });
    const [theirs] = await shop2.acquire('basket');
    const pttl = await admin.pttl(theirs!.key);

    const [released, releaseError] = await shop.release(theirs!);
    expect([released, releaseError?.code]).toEqual([false, 'redis_invalid_guard']);
    const [extended, extendError] = await shop.extend(theirs!, 3600);
    expect([extended, extendError?.code]).toEqual([false, 'redis_invalid_guard']);

    expect(await admin.get(theirs!.key)).toBe(theirs!.token);
    expect(await admin.pttl(theirs!.key)).toBeLessThanOrEqual(pttl);
    expect(await shop2.release(theirs!)).toEqual([true, undefined]);
  });

  it('its own guards still work, for the built-in key and a hash-tag subclass alike', async () => {
    for (const lock of [
      new RedisLockService({ redis: server.client(), namespace: 'shop' }),
      new RawKeyLock({ redis: server.client(), namespace: 'shop' }),
    ]) {
      const [guard] = await lock.acquire('basket');
      expect(await lock.extend(guard!, 30)).toEqual([true, undefined]);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
      expect(await admin.exists(guard!.key)).toBe(0);
    }
  });
});
