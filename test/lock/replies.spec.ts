import { describe, expect, it } from 'vitest';
import {
  BufferCache,
  RedisLockService,
  type LockGuard,
  type RedisScriptClient,
} from '../../lib/index.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { rkey } from './lock-helpers.js';

/**
 * What a misbehaving client answers: only the replies Redis gives count (SET: 'OK' or null;
 * scripts: the integers 1 or 0; fencing: a positive safe integer). Anything else gives the
 * bad-reply error in the tuple, never a lock and never a rejection. Fake clients model the
 * misbehaviour; a real Redis never answers these.
 */

const escaped = collectEscapes();
const NS = 'replies:';
const GUARD: LockGuard = { key: rkey(NS, 'k'), token: 't'.repeat(32) };

const throwingValueOf = {
  valueOf(): number {
    throw new Error('no number here');
  },
};
const STRANGE: [string, unknown][] = [
  ['a Symbol', Symbol('reply')],
  ['a null-prototype object', Object.create(null)],
  ['an object whose valueOf throws', throwingValueOf],
  ['true', true],
  ["'1'", '1'],
  ['[1]', [1]],
  ['1n', 1n],
  ['NaN', Number.NaN],
  ["'OK '", 'OK '],
];

/** A Proxy whose every trap throws, `instanceof` and `String()` included. */
const hostileProxy = (): object =>
  new Proxy(
    {},
    {
      get: () => {
        throw new Error('get');
      },
      getPrototypeOf: () => {
        throw new Error('getPrototypeOf');
      },
    },
  );

const BAD_REPLY = {
  code: 'redis_bad_reply',
  message: 'Redis lock command returned an unexpected reply',
};

const answering = (reply: unknown, withSet: boolean): RedisScriptClient => ({
  eval: () => Promise.resolve(reply),
  ...(withSet ? { set: () => Promise.resolve(reply) } : {}),
});

const set = (reply: unknown) =>
  new RedisLockService({ redis: answering(reply, true), namespace: NS });
const script = (reply: unknown, fencing = false) =>
  new RedisLockService({ redis: answering(reply, false), namespace: NS, fencing });

describe('replies a client should never give', () => {
  it.each(STRANGE)(
    'acquire by SET answered %s: no lock, the bad-reply error',
    async (_n, reply) => {
      const lock = new RedisLockService({ redis: answering(reply, true), namespace: NS });
      const [guard, error] = await lock.acquire('k');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject(BAD_REPLY);
      await settle();
      expect(escaped).toEqual([]);
    },
  );

  it.each([...STRANGE, ["'OK'", 'OK'], ['2', 2]])(
    'acquire by script answered %s: no lock, the bad-reply error',
    async (_n, reply) => {
      const lock = new RedisLockService({ redis: answering(reply, false), namespace: NS });
      const [guard, error] = await lock.acquire('k');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject(BAD_REPLY);
    },
  );

  it.each([...STRANGE, ['-1', -1], ['1.5', 1.5], ['2 ** 53', 2 ** 53], ["'7'", '7']])(
    'a fenced acquire answered %s: no lock, the bad-reply error',
    async (_n, reply) => {
      const lock = new RedisLockService({
        redis: answering(reply, false),
        namespace: NS,
        fencing: true,
      });
      const [guard, error] = await lock.acquire('k');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject(BAD_REPLY);
    },
  );

  it.each([...STRANGE, ["'OK'", 'OK'], ['2', 2]])(
    'extend answered %s: not extended, the bad-reply error',
    async (_n, reply) => {
      const lock = new RedisLockService({ redis: answering(reply, false), namespace: NS });
      const [extended, error] = await lock.extend(GUARD);
      expect(extended).toBe(false);
      expect(error).toMatchObject(BAD_REPLY);
      await settle();
      expect(escaped).toEqual([]);
    },
  );

  it('the replies Redis gives keep their meaning', async () => {
    expect((await set('OK').acquire('k'))[0]).toBeDefined();
    expect(await set(null).acquire('k')).toEqual([undefined, undefined]);
    expect((await script(1).acquire('k'))[0]).toBeDefined();
    expect(await script(0).acquire('k')).toEqual([undefined, undefined]);
    expect((await script(7, true).acquire('k'))[0]?.fence).toBe(7);
    expect(await script(0, true).acquire('k')).toEqual([undefined, undefined]);
    expect(await script(1).extend(GUARD)).toEqual([true, undefined]);
    expect(await script(0).extend(GUARD)).toEqual([false, undefined]);
    expect((await script(undefined).acquire('k'))[1]?.code).toBe('redis_no_result');
    expect((await script(null).extend(GUARD))[1]?.code).toBe('redis_no_result');
  });

  it.each([
    ['a client whose eval rejects', { eval: () => Promise.reject(hostileProxy()) }],
    ['a factory that rejects', () => Promise.reject(hostileProxy())],
  ])('%s with a Proxy whose traps throw: a failed acquire, not a rejection', async (_n, redis) => {
    const lock = new RedisLockService({ redis: redis as RedisScriptClient, namespace: NS });
    const [guard, error] = await lock.acquire('k');
    expect(guard).toBeUndefined();
    expect(error?.code).toBe('redis_lock_failed');
    expect(await lock.extend(GUARD)).toMatchObject([false, { code: 'redis_extend_failed' }]);
    await settle();
    expect(escaped).toEqual([]);
  });

  it.each(STRANGE)(
    'a client that rejects with %s: a failed acquire, not a rejection',
    async (_n, reason) => {
      const lock = new RedisLockService({ redis: { eval: () => Promise.reject(reason) } });
      const [guard, error] = await lock.acquire('k');
      expect(guard).toBeUndefined();
      expect(error?.code).toBe('redis_lock_failed');
      await settle();
      expect(escaped).toEqual([]);
    },
  );

  it.each([...STRANGE, ['[[a null-prototype object]]', [[Object.create(null)]]]] as [
    string,
    unknown,
  ][])(
    "a cache build whose release (with the entry's write) answers %s: the built value, no rejection",
    async (_n, reply) => {
      const client: RedisScriptClient = {
        // The lock is taken, there is no entry, and the release script answers `reply`.
        eval: (source: string) =>
          Promise.resolve(source.includes("'NX'") ? 1 : source.includes('SPUBLISH') ? reply : null),
      };
      const lock = new RedisLockService({ redis: client, namespace: NS });
      const silent = { log() {}, warn() {}, error() {} };
      const cache = new BufferCache({ lock, options: { logger: silent } });
      expect(await cache.getOrSet('k', () => 'built')).toBe('built');
      await settle();
      expect(escaped).toEqual([]);
    },
  );
});
