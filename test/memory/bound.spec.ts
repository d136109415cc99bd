import { Logger } from '@nestjs/common';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BufferCache, RedisLockService } from '../../lib/index.js';
import { MemoryClient, memoryClient } from '../../lib/memory/memory-client.js';
import type { ExpiryQueue } from '../../lib/memory/expiry-queue.js';
import { MemoryKeyspace } from '../../lib/memory/keyspace.js';
import { DEFAULT_MAX_KEYS, isMemoryUrl } from '../../lib/memory/memory-url.js';

/**
 * memory:// holds `maxKeys` keys at most (`memory://NAME?maxKeys=N`, 100,000 by default): a new
 * key beyond evicts the least recently used one, as Redis's allkeys-lru does.
 */

afterEach(() => vi.restoreAllMocks());
const quiet = (): void => void vi.spyOn(Logger.prototype, 'log').mockImplementation(() => {});

describe('memory:// keyspace bound', () => {
  it('a new key beyond maxKeys evicts the least recently used one; reads count as use', () => {
    const keyspace = new MemoryKeyspace(Date.now, 3);
    for (const key of ['a', 'b', 'c']) keyspace.set(key, key);
    expect(keyspace.get('a')).toBe('a');
    keyspace.set('d', 'd');
    // EXISTS is a use too: a, then c, are the most recent now, and d the least.
    expect([keyspace.exists('a'), keyspace.exists('b'), keyspace.exists('c')]).toEqual([1, 0, 1]);
    keyspace.set('c', 'again');
    keyspace.set('e', 'e');
    expect(['a', 'c', 'd', 'e'].map((key) => keyspace.get(key))).toEqual(['a', 'again', null, 'e']);
    expect(keyspace.dbsize()).toBe(3);
  });

  it(`holds ${DEFAULT_MAX_KEYS} keys by default`, async () => {
    const client = memoryClient('memory://');
    for (let i = 0; i < DEFAULT_MAX_KEYS + 50; i++) await client.set(`k${i}`, 'v');
    expect(await client.dbsize()).toBe(DEFAULT_MAX_KEYS);
    expect([await client.exists('k49'), await client.exists('k50')]).toEqual([0, 1]);
  });

  it('memory://NAME?maxKeys=N sets it; the first URL of a name sets its bound', async () => {
    expect(['memory://?maxKeys=5', 'memory://bound-a?maxKeys=100000000'].map(isMemoryUrl)).toEqual([
      true,
      true,
    ]);
    const first = memoryClient('memory://bound-b?maxKeys=2');
    const second = memoryClient('memory://bound-b?maxKeys=10');
    for (const key of ['x', 'y', 'z']) await second.set(key, key);
    expect(await first.dbsize()).toBe(2);
  });

  it.each([
    'memory://?maxKeys=0',
    'memory://?maxKeys=-1',
    'memory://?maxKeys=1e3',
    'memory://?x=1',
  ])('%s is no memory URL: the lock refuses it', (url) => {
    expect(isMemoryUrl(url)).toBe(false);
    expect(() => new RedisLockService({ redis: url as 'memory://' })).toThrow(
      expect.objectContaining({ name: 'BufferLockConfigError', code: 'redis_client_invalid' }),
    );
  });

  it('20,000 distinct entries that never expire (ttl of 100 years) stay within maxKeys', async () => {
    quiet();
    const lock = new RedisLockService({ redis: 'memory://?maxKeys=1000' });
    const cache = new BufferCache({ lock });
    const ttl = 100 * 365 * 24 * 3600;
    for (let i = 0; i < 20_000; i++) await cache.set(`/page/${i}`, `page ${i}`, { ttl });
    const client = lock.redis as MemoryClient;
    expect(await client.dbsize()).toBe(1000);
    // The newest are kept, and read as entries.
    expect(await cache.get('/page/19999')).toBe('page 19999');
    expect(await cache.get('/page/0')).toBeUndefined();
  });

  it('keys deleted long before their expiry leave no expiries queued', () => {
    const keyspace = new MemoryKeyspace();
    const century = String(100 * 365 * 24 * 3600 * 1000);
    for (let i = 0; i < 200_000; i++) {
      keyspace.set(`lock:${i}`, 't', 'PX', century);
      keyspace.del(`lock:${i}`);
    }
    const queued = (keyspace as unknown as { expiries: ExpiryQueue }).expiries.size;
    expect(keyspace.dbsize()).toBe(0);
    expect(queued).toBeLessThanOrEqual(1025);
  });
});
