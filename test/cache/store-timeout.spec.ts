import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  connectFailFast,
  ENGLISH_MESSAGES,
  LockError,
  RedisLockService,
  type BufferCacheStore,
} from '../../lib/index.js';
import { MemoryLogger, deferred } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * A store of your own whose client stops answering holds no caller: each of its calls ends within
 * `storeTimeout`. A read past it is a miss, a write past it fails, and a `set` that lands later is
 * deleted again.
 */

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

let n = 0;
const key = (): string => `stuck:${++n}`;

/** A store whose calls hang until `answer()`; what it holds, and the calls it got, in order. */
function stuckStore(): {
  store: BufferCacheStore;
  memory: Map<string, string>;
  calls: string[];
  answer: () => void;
} {
  const memory = new Map<string, string>();
  const calls: string[] = [];
  const gate = deferred();
  const store: BufferCacheStore = {
    get: async (k) => {
      calls.push(`get ${k}`);
      await gate.promise;
      return memory.get(k);
    },
    set: async (k, v) => {
      calls.push(`set ${k}`);
      await gate.promise;
      memory.set(k, v);
    },
    delete: async (k) => {
      calls.push(`delete ${k}`);
      await gate.promise;
      memory.delete(k);
    },
  };
  return { store, memory, calls, answer: () => gate.resolve() };
}

function worker(store: BufferCacheStore): { cache: BufferCache; logger: MemoryLogger } {
  const lock = new RedisLockService({
    redis: () => connectFailFast(server.url),
    namespace: 'test:stuck:',
  });
  const logger = new MemoryLogger();
  const options = { logger, storeTimeout: 0.2 };
  return { cache: new BufferCache({ lock, store, options }), logger };
}

const timeoutText = ENGLISH_MESSAGES.cache_store_timeout.replace('SECONDS', '0.2');

describe('a store that stops answering', () => {
  it('a read is a miss after storeTimeout: get() answers undefined, getOrSet() builds (logged)', async () => {
    const { store } = stuckStore();
    const { cache, logger } = worker(store);
    const k = key();
    let started = Date.now();
    expect(await cache.get(k)).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(1000);
    started = Date.now();
    expect(await cache.getOrSet(k, () => 'built')).toBe('built');
    // Its read, its write (which fails) and the release: each ends within the bound.
    expect(Date.now() - started).toBeLessThan(2000);
    expect(logger.at('error').some((line) => line.includes(timeoutText))).toBe(true);
  });

  it('set() and delete() reject with cache_write_failed, naming the bound', async () => {
    const { store } = stuckStore();
    const { cache } = worker(store);
    const k = key();
    for (const write of [() => cache.set(k, 1), () => cache.delete(k)]) {
      const error = await write().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockError);
      expect((error as LockError).code).toBe('cache_write_failed');
      expect((error as LockError).message).toContain(timeoutText);
    }
  });

  it('a set() that lands after its bound is deleted again', async () => {
    const { store, memory, calls, answer } = stuckStore();
    const { cache } = worker(store);
    const k = key();
    await expect(cache.set(k, 'late')).rejects.toBeInstanceOf(LockError);
    answer();
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(calls).toEqual([`set buffer:cache:${k}`, `delete buffer:cache:${k}`]);
    expect([...memory.keys()]).toEqual([]);
  });
});
