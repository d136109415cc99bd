import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { refusedWith } from '../support/refused.js';
import {
  BufferLockConfigError,
  LockError,
  RedisLockService,
  type LockGuard,
  type MessageId,
  type RedisLockOptions,
  type RedisScriptClient,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { LOCK_FAMILIES } from '../support/client-families.js';
import { failFastClient, rkey, withRedisServer } from './lock-helpers.js';

const NS = 'messages-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

const thrownBy = (options: unknown): unknown => {
  try {
    return new RedisLockService(options as RedisLockOptions);
  } catch (error) {
    return error;
  }
};

const noClient = (): undefined => undefined;

/** A client whose eval answers nothing: a misbehaving client library (no Redis involved). */
const silentClient = (answer: undefined | null): RedisScriptClient => ({ eval: () => answer });

/** A client on a stopped server. */
async function deadClient(): Promise<Redis> {
  const down = await startRedis();
  const client = failFastClient(down);
  await client.ping();
  await down.stop();
  return client;
}

/**
 * Runs `body` while the test server demands a password, with a client that has none, so Redis
 * itself answers NOAUTH: a real Redis error, not one made up by the test.
 */
async function withUnauthenticatedClient<T>(body: (client: Redis) => Promise<T>): Promise<T> {
  const client = server.client({ enableReadyCheck: false, lazyConnect: true, protocol: 2 });
  await admin.config('SET', 'requirepass', 'not-logged-anywhere');
  try {
    return await body(client);
  } finally {
    await admin.config('SET', 'requirepass', '');
  }
}

/** A key held by a real worker, for release tests. */
async function heldGuard(key: string): Promise<LockGuard> {
  const [guard] = await new RedisLockService({
    redis: () => server.client(),
    namespace: NS,
  }).acquire(key);
  return guard!;
}

describe('messages: each error’s id and English text', () => {
  describe('new: a bad option is thrown as BufferLockConfigError', () => {
    it.each<[string, Record<string, unknown>, string]>([
      [
        'redis_client_invalid',
        { redis: 42 },
        'cache_lock redis must be an object with an eval() method or a code reference returning one',
      ],
      [
        'redis_namespace_invalid',
        { redis: noClient, namespace: '' },
        'cache_lock namespace must be a non-empty string',
      ],
      [
        'redis_ttl_invalid',
        { redis: noClient, ttl: -1 },
        'cache_lock ttl must be a positive number of seconds',
      ],
    ])('%s', (code, options, text) => {
      const error = thrownBy(options);
      expect(error).toBeInstanceOf(BufferLockConfigError);
      expect(error).toMatchObject({ code, message: refusedWith(text) });
    });
  });

  describe('acquire (returned, not thrown)', () => {
    it('lock_key_undefined: cache key is not defined', async () => {
      const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
      const [guard, error] = await lock.acquire(undefined as unknown as string);
      expect(guard).toBeUndefined();
      expect(error).toBeInstanceOf(LockError);
      expect(error).toMatchObject({
        code: 'lock_key_undefined',
        message: 'cache key is not defined',
      });
    });

    it('redis_lock_failed: Redis lock failed: ERROR, with ERROR from a real Redis error', async () => {
      await withUnauthenticatedClient(async (client) => {
        const lock = new RedisLockService({ redis: client, namespace: NS });
        const [guard, error] = await lock.acquire('noauth');
        expect(guard).toBeUndefined();
        expect(error).toMatchObject({
          code: 'redis_lock_failed',
          message: 'Redis lock failed: NOAUTH Authentication required.',
        });
        expect((error!.cause as Error).message).toBe('NOAUTH Authentication required.');
      });
    });

    it('redis_lock_failed: ERROR from the client when the server is gone', async () => {
      const lock = new RedisLockService({ redis: await deadClient(), namespace: NS });
      const [guard, error] = await lock.acquire('dead');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject({
        code: 'redis_lock_failed',
        message: 'Redis lock failed: Connection is closed.',
      });
    });

    it('redis_lock_failed: the text after ERROR is passed on unchanged', async () => {
      const text = 'ERROR 💥 in ÜBER-LOCK: ERROR';
      const lock = new RedisLockService({
        redis: () => {
          throw new Error(text);
        },
      });
      expect((await lock.acquire('k'))[1]?.message).toBe(`Redis lock failed: ${text}`);
    });

    it('redis_no_client: Redis client factory returned no client', async () => {
      const lock = new RedisLockService({ redis: () => undefined, namespace: NS });
      const [guard, error] = await lock.acquire('no-client');
      expect(guard).toBeUndefined();
      expect(error).toMatchObject({
        code: 'redis_no_client',
        message: 'Redis lock failed: Redis client factory returned no client',
      });
    });

    it.each([undefined, null])(
      'redis_no_result: Redis lock command returned no result (eval answered %s)',
      async (answer) => {
        const lock = new RedisLockService({ redis: silentClient(answer), namespace: NS });
        const [guard, error] = await lock.acquire('silent');
        expect(guard).toBeUndefined();
        expect(error).toMatchObject({
          code: 'redis_no_result',
          message: 'Redis lock command returned no result',
        });
      },
    );
  });

  describe('release (returned, not thrown)', () => {
    it('redis_invalid_guard: invalid lock guard', async () => {
      const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
      const [ok, error] = await lock.release(undefined as unknown as LockGuard);
      expect(ok).toBe(false);
      expect(error).toMatchObject({ code: 'redis_invalid_guard', message: 'invalid lock guard' });
    });

    it('redis_unlock_failed: Redis unlock failed: ERROR, with ERROR from a real Redis error', async () => {
      const guard = await heldGuard('unlock-noauth');
      await withUnauthenticatedClient(async (client) => {
        const lock = new RedisLockService({ redis: client, namespace: NS });
        const [ok, error] = await lock.release(guard);
        expect(ok).toBe(false);
        expect(error).toMatchObject({
          code: 'redis_unlock_failed',
          message: 'Redis unlock failed: NOAUTH Authentication required.',
        });
      });
      expect(await admin.get(guard.key)).toBe(guard.token);
    });

    it('redis_unlock_failed: ERROR from the client when the server is gone', async () => {
      const lock = new RedisLockService({ redis: await deadClient(), namespace: NS });
      const [ok, error] = await lock.release({ key: rkey(NS, 'k'), token: 't' });
      expect(ok).toBe(false);
      expect(error).toMatchObject({
        code: 'redis_unlock_failed',
        message: 'Redis unlock failed: Connection is closed.',
      });
    });

    it('redis_no_result on release (eval answered nothing)', async () => {
      const lock = new RedisLockService({ redis: silentClient(undefined), namespace: NS });
      const [ok, error] = await lock.release({ key: rkey(NS, 'k'), token: 't' });
      expect(ok).toBe(false);
      expect(error).toMatchObject({
        code: 'redis_no_result',
        message: 'Redis lock command returned no result',
      });
    });
  });

  describe('a key that is no string, a failed extend, bad message overrides', () => {
    it('lock_key_invalid: cache key must be a string', async () => {
      const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
      expect((await lock.acquire(7 as unknown as string))[1]).toMatchObject({
        code: 'lock_key_invalid',
        message: 'cache key must be a string',
      });
    });

    it('redis_extend_failed: Redis lock extend failed: ERROR', async () => {
      const lock = new RedisLockService({ redis: await deadClient(), namespace: NS });
      expect(await lock.extend({ key: rkey(NS, 'k'), token: 't' })).toEqual([
        false,
        expect.objectContaining({
          code: 'redis_extend_failed',
          message: 'Redis lock extend failed: Connection is closed.',
        }),
      ]);
    });

    it.each([
      ['a text that is not a string', { redis_lock_failed: 5 }],
      ['an unknown message id', { no_such_message: 'x' }],
      ['not an object', 'texts'],
    ])('redis_messages_invalid: messages with %s', (_, messages) => {
      const error = thrownBy({ redis: () => undefined, messages });
      expect(error).toBeInstanceOf(BufferLockConfigError);
      expect(error).toMatchObject({
        code: 'redis_messages_invalid',
        message: refusedWith('cache_lock messages must be an object of texts keyed by message id'),
      });
    });

    it('an invalid override of the very text being reported is reported, not rendered', () => {
      const error = thrownBy({ redis: 1, messages: { redis_client_invalid: 5 } });
      expect(error).toBeInstanceOf(BufferLockConfigError);
      expect((error as BufferLockConfigError).violations.map((v) => v.code)).toEqual([
        'redis_client_invalid',
        'redis_messages_invalid',
      ]);
      expect((error as BufferLockConfigError).message.split('\n')[0]).toEqual(
        refusedWith(
          'cache_lock redis must be an object with an eval() method or a code reference returning one',
        ),
      );
    });
  });
});

describe('messages: overrides (any characters, emoji included)', () => {
  const overrides = {
    redis_client_invalid: '🚫 redis: Objekt mit eval() oder Fabrik',
    redis_namespace_invalid: '🏷️ 名前空間が空です',
    redis_ttl_invalid: '⏳ ttl doit être un nombre positif',
    lock_key_undefined: '🔑❓',
    redis_lock_failed: '🔒 Sperre fehlgeschlagen — ERROR 💥',
    redis_no_client: '🏭 keine Verbindung',
    redis_no_result: '🤐 keine Antwort',
    redis_invalid_guard: '🛡️ ungültig',
    redis_unlock_failed: '🔓 Freigabe fehlgeschlagen: ERROR',
  } satisfies Partial<Record<MessageId, string>>;

  const withOverrides = (redis: RedisLockOptions['redis']): RedisLockService =>
    new RedisLockService({ redis, namespace: NS, messages: overrides });

  it('apply to the errors new throws', () => {
    expect(thrownBy({ redis: 42, messages: overrides })).toMatchObject({
      code: 'redis_client_invalid',
      message: refusedWith(overrides.redis_client_invalid),
    });
    expect(thrownBy({ redis: () => undefined, namespace: '', messages: overrides })).toMatchObject({
      code: 'redis_namespace_invalid',
      message: refusedWith(overrides.redis_namespace_invalid),
    });
    expect(thrownBy({ redis: () => undefined, ttl: 0, messages: overrides })).toMatchObject({
      code: 'redis_ttl_invalid',
      message: refusedWith(overrides.redis_ttl_invalid),
    });
  });

  it('apply to the errors acquire returns, with ERROR filled in', async () => {
    expect(
      (await withOverrides(() => server.client()).acquire(null as unknown as string))[1],
    ).toMatchObject({
      code: 'lock_key_undefined',
      message: '🔑❓',
    });
    await withUnauthenticatedClient(async (client) => {
      expect((await withOverrides(client).acquire('k'))[1]).toMatchObject({
        code: 'redis_lock_failed',
        message: '🔒 Sperre fehlgeschlagen — NOAUTH Authentication required. 💥',
      });
    });
    expect((await withOverrides(() => undefined).acquire('k'))[1]).toMatchObject({
      code: 'redis_no_client',
      message: '🔒 Sperre fehlgeschlagen — 🏭 keine Verbindung 💥',
    });
    expect((await withOverrides(silentClient(undefined)).acquire('k'))[1]).toMatchObject({
      code: 'redis_no_result',
      message: '🤐 keine Antwort',
    });
  });

  it('apply to the errors release returns', async () => {
    expect((await withOverrides(() => server.client()).release({} as LockGuard))[1]).toMatchObject({
      code: 'redis_invalid_guard',
      message: '🛡️ ungültig',
    });
    expect(
      (await withOverrides(await deadClient()).release({ key: rkey(NS, 'k'), token: 't' }))[1],
    ).toMatchObject({
      code: 'redis_unlock_failed',
      message: '🔓 Freigabe fehlgeschlagen: Connection is closed.',
    });
  });

  it('ids left out keep their English text', async () => {
    const lock = new RedisLockService({
      redis: () => undefined,
      messages: { redis_lock_failed: '🔒 ERROR' },
    });
    expect((await lock.acquire('k'))[1]?.message).toBe(
      '🔒 Redis client factory returned no client',
    );
    expect((await lock.release({} as LockGuard))[1]?.message).toBe('invalid lock guard');
  });
});

describe.each(LOCK_FAMILIES)('messages: a real Redis error reply through $name', (family) => {
  const ns = `${NS}${family.name}:`;
  const connect = (): Promise<RedisLockService> =>
    family.connect(server).then((client) => new RedisLockService({ redis: client, namespace: ns }));
  afterAll(() => family.closeAll());

  it('redis_lock_failed: an acquire while Redis is out of memory has the OOM reply in ERROR and cause', async () => {
    const lock = await connect();
    await admin.config('SET', 'maxmemory', '1');
    let result: Awaited<ReturnType<RedisLockService['acquire']>>;
    try {
      result = await lock.acquire('out-of-memory');
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    const [guard, error] = result;
    expect(guard).toBeUndefined();
    expect(error?.code).toBe('redis_lock_failed');
    expect((error!.cause as Error).message).toMatch(/^OOM command not allowed/);
    expect(error!.message).toBe(`Redis lock failed: ${(error!.cause as Error).message}`);
    expect(await admin.exists(lock.redisKey('out-of-memory'))).toBe(0);
  });

  it('redis_unlock_failed and redis_extend_failed: a lock key holding a hash gives WRONGTYPE, and the hash stays', async () => {
    const lock = await connect();
    const guard = { key: lock.redisKey('hash'), token: 't' };
    await admin.hset(guard.key, 'field', 'value');
    const [released, unlockError] = await lock.release(guard);
    const [extended, extendError] = await lock.extend(guard);
    expect([released, extended]).toEqual([false, false]);
    for (const [error, text] of [
      [unlockError, 'Redis unlock failed'],
      [extendError, 'Redis lock extend failed'],
    ] as const) {
      expect((error!.cause as Error).message).toMatch(/^WRONGTYPE/);
      expect(error!.message).toBe(`${text}: ${(error!.cause as Error).message}`);
    }
    expect([unlockError!.code, extendError!.code]).toEqual([
      'redis_unlock_failed',
      'redis_extend_failed',
    ]);
    expect(await admin.hget(guard.key, 'field')).toBe('value');
  });
});
