import { Injectable } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  Cached,
  RedisLockService,
} from '../../lib/index.js';
import { MemoryLogger, deferred } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `staleIfError`: an entry past `ttl + grace` is kept that many seconds more, and served when its
 * rebuild fails, instead of the error. What was deleted or replaced is never served in its place.
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

type Options = NonNullable<ConstructorParameters<typeof BufferCache>[0]['options']>;

/** A cache as one worker process has it: its own client, lock and log. */
function worker(options: Options = {}): { cache: BufferCache; logger: MemoryLogger } {
  const logger = new MemoryLogger();
  const lock = new RedisLockService({ redis: () => server.client(), namespace: 'test:sie:' });
  return { cache: new BufferCache({ lock, options: { logger, ...options } }), logger };
}

let n = 0;
const key = (): string => `quote:${++n}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const upstream = (): Error => new Error('upstream 500');
const failing = (): Promise<string> => Promise.reject(upstream());

/** The events of `cache`, in order; `refresh-failed` with its error's message. */
function eventsOf(cache: BufferCache): string[] {
  const seen: string[] = [];
  for (const name of ['hit', 'miss', 'stale'] as const) cache.on(name, () => seen.push(name));
  cache.on('refresh-failed', (_key, error) => seen.push(`refresh-failed: ${String(error)}`));
  return seen;
}

/** A factory that counts its tries, tells when one began, and fails once `fail()` is called. */
function failingLater(): {
  factory: () => Promise<string>;
  began: Promise<void>;
  fail: () => void;
  tries: () => number;
} {
  let tries = 0;
  const began = deferred();
  const failed = deferred();
  const factory = async (): Promise<string> => {
    tries++;
    began.resolve();
    await failed.promise;
    throw upstream();
  };
  return { factory, began: began.promise, fail: () => failed.resolve(), tries: () => tries };
}

describe('an entry past ttl + grace whose rebuild fails', () => {
  it('is served instead of the error within staleIfError; the failure is logged, emitted, and backed off', async () => {
    const { cache, logger } = worker();
    const k = key();
    const options = { ttl: 0.1, staleIfError: 30 };
    await cache.getOrSet(k, () => 'good', options);
    await sleep(150);
    const events = eventsOf(cache);
    let tries = 0;
    const counted = (): Promise<string> => {
      tries++;
      return Promise.reject(upstream());
    };
    expect(await cache.getOrSet(k, counted, options)).toBe('good');
    expect(tries).toBe(1);
    // Within the back-off (1 s): served with no new try.
    expect(await cache.getOrSet(k, counted, options)).toBe('good');
    expect(tries).toBe(1);
    expect(events).toEqual(['refresh-failed: Error: upstream 500', 'stale', 'stale']);
    expect(logger.at('warn').filter((line) => line.includes('upstream 500'))).toHaveLength(1);
    // Once the back-off has passed the rebuild is tried again; its value replaces the entry.
    await sleep(1100);
    expect(await cache.getOrSet(k, () => 'rebuilt', options)).toBe('rebuilt');
    expect(await cache.getOrSet(k, counted, options)).toBe('rebuilt');
    expect(events.slice(3)).toEqual(['miss', 'hit']);
  });

  it('a rebuild that passes hardTimeout is a failure too: the expired value is served', async () => {
    const { cache } = worker();
    const k = key();
    const options = { ttl: 0.1, staleIfError: 30, hardTimeout: 0.2 };
    await cache.getOrSet(k, () => 'good', options);
    await sleep(150);
    const started = Date.now();
    expect(await cache.getOrSet(k, () => new Promise<string>(() => {}), options)).toBe('good');
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it('is served past ttl + grace; past ttl + grace + staleIfError the error reaches the caller', async () => {
    const { cache } = worker();
    const k = key();
    const options = { ttl: 0.1, grace: 0.2, staleIfError: 0.3 };
    await cache.getOrSet(k, () => 'good', options);
    // Past grace, within staleIfError.
    await sleep(400);
    expect(await cache.getOrSet(k, () => Promise.reject(upstream()), options)).toBe('good');
    // Past the window, and past the back-off.
    await sleep(1100);
    await expect(cache.getOrSet(k, () => Promise.reject(upstream()), options)).rejects.toThrow(
      'upstream 500',
    );
  });

  it("the call's own window counts: an entry its writer keeps longer is not served past it", async () => {
    const { cache } = worker();
    const k = key();
    await cache.getOrSet(k, () => 'good', { ttl: 0.1, staleIfError: 30 });
    await sleep(300);
    await expect(cache.getOrSet(k, failing, { ttl: 0.1, staleIfError: 0.1 })).rejects.toThrow(
      'upstream 500',
    );
    expect(await cache.getOrSet(k, failing, { ttl: 0.1, staleIfError: 1 })).toBe('good');
  });

  it('the store keeps the entry ttl + grace + staleIfError, and ttl + grace without it', async () => {
    const cachePrefix = 'sie:kept:';
    const { cache } = worker({ cachePrefix });
    await cache.set(key(), 'with', { ttl: 10, grace: 20, staleIfError: 300 });
    await cache.set(key(), 'without', { ttl: 10, grace: 20 });
    const kept = await Promise.all(
      (await admin.keys(`${cachePrefix}*`)).map(async (k) => [
        await admin.get(k).then((text) => text!.slice(text!.indexOf('"'))),
        Math.round((await admin.pttl(k)) / 1000),
      ]),
    );
    expect(Object.fromEntries(kept)).toEqual({ '"with"': 330, '"without"': 30 });
  });
});

describe('nothing deleted or replaced is served in place of the error', () => {
  const options = { ttl: 0.1, staleIfError: 30 };
  // Each entry has a tag of its own (its key): deleting one tag leaves the others.
  const tagged = (k: string) => ({ ...options, tags: [k] });

  it('an entry deleted (delete, deleteByTag) before the call, or while its rebuild runs, is not served; one left alone is', async () => {
    const [a, b] = [worker(), worker()];
    const writes: [string, (k: string) => Promise<void>][] = [
      ['delete', (k) => b.cache.delete(k)],
      ['deleteByTag', (k) => b.cache.deleteByTag(k)],
    ];
    for (const [name, write] of writes) {
      for (const when of ['before the call', 'while the rebuild runs'] as const) {
        const k = key();
        const untouched = key();
        for (const each of [k, untouched]) await a.cache.getOrSet(each, () => 'old', tagged(each));
        await sleep(150);
        const rebuild = failingLater();
        if (when === 'before the call') await write(k);
        const call = a.cache.getOrSet(k, rebuild.factory, tagged(k)).catch((e: unknown) => e);
        if (when === 'while the rebuild runs') {
          await rebuild.began;
          await write(k);
        }
        rebuild.fail();
        expect([name, when, String(await call)]).toEqual([name, when, 'Error: upstream 500']);
        // The control: the same steps with no write serve the old value.
        const control = failingLater();
        control.fail();
        expect(await a.cache.getOrSet(untouched, control.factory, tagged(untouched))).toBe('old');
      }
    }
  });

  it('an entry replaced by set() while its rebuild runs: the call gets the new value, never the old', async () => {
    const [a, b] = [worker(), worker()];
    const k = key();
    await a.cache.getOrSet(k, () => 'old', options);
    await sleep(150);
    const rebuild = failingLater();
    const call = a.cache.getOrSet(k, rebuild.factory, options);
    await rebuild.began;
    await b.cache.set(k, 'new', { ttl: 60 });
    rebuild.fail();
    expect(await call).toBe('new');
  });

  it('with l1: a copy is served in place of the error only while the store still has its entry', async () => {
    const l1 = { maxAge: 60 };
    const [a, b] = [worker({ l1 }), worker({ l1 })];
    const [kept, deleted, deletedDuring] = [key(), key(), key()];
    for (const k of [kept, deleted, deletedDuring]) {
      await a.cache.getOrSet(k, () => 'old', options);
      // Held in a's l1 too.
      expect(await a.cache.get(k)).toBe('old');
    }
    await sleep(150);
    expect(await a.cache.getOrSet(kept, failing, options)).toBe('old');
    await b.cache.delete(deleted);
    await expect(a.cache.getOrSet(deleted, failing, options)).rejects.toThrow('upstream 500');
    const rebuild = failingLater();
    const call = a.cache.getOrSet(deletedDuring, rebuild.factory, options);
    await rebuild.began;
    await b.cache.delete(deletedDuring);
    rebuild.fail();
    await expect(call).rejects.toThrow('upstream 500');
  });
});

describe('calls that wait for the failed rebuild', () => {
  it('get the expired value too, in its process and in others, and the factory ran once', async () => {
    const [a, b] = [worker(), worker()];
    const k = key();
    const options = { ttl: 0.1, staleIfError: 30 };
    await a.cache.getOrSet(k, () => 'good', options);
    await sleep(150);
    const rebuild = failingLater();
    const first = a.cache.getOrSet(k, rebuild.factory, options);
    await rebuild.began;
    const waiting = [
      // The same options: the lookup under way.
      ...[1, 2, 3].map(() => a.cache.getOrSet(k, rebuild.factory, options)),
      // Other options: the build under way in this process.
      ...[1, 2].map(() => a.cache.getOrSet(k, rebuild.factory, { ...options, timeout: 1 })),
      // Another process: the lock's holder.
      ...[1, 2, 3].map(() => b.cache.getOrSet(k, rebuild.factory, options)),
    ];
    // Long enough for every call to be waiting: b's on the lock a holds.
    await sleep(200);
    rebuild.fail();
    expect(await Promise.all([first, ...waiting])).toEqual(Array.from({ length: 9 }, () => 'good'));
    expect(rebuild.tries()).toBe(1);
  });
});

describe('options', () => {
  it.each([
    ['-1', -1],
    ["'soon'", 'soon'],
    ['NaN', Number.NaN],
    ['more than 7 days', 604_801],
  ])(
    'a bad staleIfError (%s) is refused naming the option, and the factory is not run',
    async (_name, value) => {
      const { cache } = worker();
      let ran = false;
      const error = await cache
        .getOrSet(key(), () => (ran = true), { staleIfError: value } as never)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BufferLockConfigError);
      expect((error as BufferLockConfigError).violations.map((v) => v.code)).toEqual([
        'cache_stale_if_error_invalid',
      ]);
      expect((error as Error).message).toContain('staleIfError');
      expect(ran).toBe(false);
    },
  );

  it('7 days, 0, and seconds as a string are taken', async () => {
    const { cache } = worker();
    for (const staleIfError of [604_800, 0, '30'])
      expect(await cache.getOrSet(key(), () => 'v', { staleIfError } as never)).toBe('v');
  });

  it('cacheDefaults refuses a bad one, and gives a good one to every call', async () => {
    expect(() => worker({ cacheDefaults: { staleIfError: -1 } })).toThrow(BufferLockConfigError);
    const { cache } = worker({ cacheDefaults: { ttl: 0.1, staleIfError: 30 } });
    const k = key();
    await cache.getOrSet(k, () => 'good');
    await sleep(150);
    expect(await cache.getOrSet(k, () => Promise.reject(upstream()))).toBe('good');
  });

  it('@Cached takes it, and refuses a bad one when the class is defined', async () => {
    const refused = ((): unknown => {
      try {
        return Cached('k', { staleIfError: -1 });
      } catch (error) {
        return error;
      }
    })();
    expect(refused).toBeInstanceOf(BufferLockConfigError);
    expect((refused as BufferLockConfigError).code).toBe('cache_stale_if_error_invalid');
    @Injectable()
    class Quotes {
      fail = false;
      @Cached('cached:quote', { ttl: 0.1, staleIfError: 30 })
      async latest(): Promise<number> {
        if (this.fail) throw upstream();
        return 42;
      }
    }
    const ref = await Test.createTestingModule({
      imports: [BufferLockModule.forRoot({ redis: server.url, namespace: 'test:sie:cached:' })],
      providers: [Quotes],
    }).compile();
    const app = await ref.init();
    try {
      const quotes = app.get(Quotes);
      expect(await quotes.latest()).toBe(42);
      await sleep(150);
      quotes.fail = true;
      expect(await quotes.latest()).toBe(42);
    } finally {
      await app.close();
    }
  });
});
