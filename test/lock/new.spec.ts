import type { Redis } from 'ioredis';
import { describe, expect, it, vi } from 'vitest';
import { refusedWith } from '../support/refused.js';
import {
  BufferLockConfigError,
  ENGLISH_MESSAGES,
  RedisLockService,
  type RedisLockOptions,
  type RedisScriptClient,
} from '../../lib/index.js';
import { type RedisServer } from '../support/redis-server.js';
import { commandStats, sleep, withRedisServer } from './lock-helpers.js';

const NS = 'new-spec:';
let server: RedisServer;
let admin: Redis;

withRedisServer((s, a) => ((server = s), (admin = a)));

const makeClient = (): Redis => server.client();
const clientCount = async (): Promise<number> =>
  String(await admin.client('LIST'))
    .trim()
    .split('\n').length;

/** `new RedisLockService(options)`, returning the error it threw (the test fails if none). */
function configErrorOf(options: unknown): BufferLockConfigError {
  try {
    const lock = new RedisLockService(options as RedisLockOptions);
    throw new Error(`new accepted ${JSON.stringify(options)} (namespace ${lock.namespace})`);
  } catch (error) {
    expect(error).toBeInstanceOf(BufferLockConfigError);
    return error as BufferLockConfigError;
  }
}

/** `rest` with one more option, `name`, whose getter throws. */
const throwing = (name: string, rest: object = {}): object =>
  Object.defineProperty({ ...rest }, name, {
    enumerable: true,
    get: () => {
      throw new Error(`${name} cannot be read`);
    },
  });

describe('options: defaults and read-only accessors', () => {
  describe('defaults', () => {
    it("namespace defaults to 'buffer:lock:' and ttl to 60", () => {
      const lock = new RedisLockService({ redis: () => server.client() });
      expect(lock.namespace).toBe('buffer:lock:');
      expect(lock.ttl).toBe(60);
      expect(lock.messageOverrides).toBeUndefined();
    });

    it('the defaults apply to the Redis key and the PX of a real lock', async () => {
      const lock = new RedisLockService({ redis: () => server.client() });
      const [guard] = await lock.acquire('defaults');
      expect(guard?.key.startsWith('buffer:lock:')).toBe(true);
      const pttl = await admin.pttl(guard!.key);
      expect(pttl).toBeGreaterThan(55_000);
      expect(pttl).toBeLessThanOrEqual(60_000);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    });
  });

  describe('accessors', () => {
    it('each option has a read-only accessor with the value given to new', () => {
      const factory = makeClient;
      const messages = { redis_lock_failed: '🔒 ERROR' };
      const lock = new RedisLockService({ redis: factory, namespace: NS, ttl: 0.5, messages });
      expect(lock.redis).toBe(factory);
      expect(lock.namespace).toBe(NS);
      expect(lock.ttl).toBe(0.5);
      expect(lock.messageOverrides).toEqual(messages);
    });

    it('the redis accessor gives back a client object as given', () => {
      const client = server.client({ lazyConnect: true });
      expect(new RedisLockService({ redis: client }).redis).toBe(client);
    });

    it.each([
      ['redis', () => server.client()],
      ['namespace', 'other:'],
      ['ttl', 0],
      ['messageOverrides', {}],
    ])(
      'assigning %s after new throws (ES modules are strict), so no unchecked value gets in',
      (name, value) => {
        const lock = new RedisLockService({ redis: () => server.client(), namespace: NS, ttl: 5 });
        expect(() => {
          (lock as unknown as Record<string, unknown>)[name] = value;
        }).toThrow(TypeError);
        expect(lock.namespace).toBe(NS);
        expect(lock.ttl).toBe(5);
      },
    );
  });
});

describe('new', () => {
  describe('redis_client_invalid: redis must be a client object or a factory', () => {
    it.each([
      ['missing', {}],
      ['a number', { redis: 42 }],
      ['a string', { redis: 'redis://127.0.0.1:6379' }],
      ['an object without eval', { redis: { get: () => 'x' } }],
      ['an object whose eval is not a function', { redis: { eval: 'yes' } }],
      ['null', { redis: null }],
      ['explicit undefined', { redis: undefined }],
    ])('%s throws with the exact text and code', (_, options) => {
      const error = configErrorOf(options);
      expect(error.message).toEqual(
        refusedWith(
          'cache_lock redis must be an object with an eval() method or a code reference returning one',
        ),
      );
      expect(error.code).toBe('redis_client_invalid');
      expect(error.violations).toEqual([
        {
          property: 'redis',
          code: 'redis_client_invalid',
          message: error.message,
          values: [expect.objectContaining({ name: 'redis' })],
        },
      ]);
    });

    it('no options at all throws redis_client_invalid', () => {
      expect(configErrorOf(undefined).code).toBe('redis_client_invalid');
    });
  });

  describe('redis_namespace_invalid: namespace must be a non-empty string', () => {
    it.each([
      ['the empty string', ''],
      ['a number', 7],
      ['an array', ['a']],
      ['null', null],
    ])('%s throws with the exact text and code', (_, namespace) => {
      const error = configErrorOf({ redis: () => server.client(), namespace });
      expect(error.message).toEqual(refusedWith('cache_lock namespace must be a non-empty string'));
      expect(error.code).toBe('redis_namespace_invalid');
      expect(error.violations.map((v) => v.property)).toEqual(['namespace']);
    });
  });

  describe('redis_ttl_invalid: ttl must be a positive number of seconds', () => {
    it.each([
      ['0', 0],
      ['-1', -1],
      ['-0.5', -0.5],
      ['NaN', NaN],
      ['Infinity', Infinity],
      ['-Infinity', -Infinity],
      ['1e21 (an exponent form when printed)', 1e21],
      ['1e16 (too many milliseconds for PX)', 10_000_000_000_000_000],
      ["'1e3'", '1e3'],
      ["'abc'", 'abc'],
      ["''", ''],
      ["' 30'", ' 30'],
      ["'0'", '0'],
      ['true', true],
      ['{}', {}],
      ['a bigint', 30n],
      ['null', null],
    ])('%s throws with the exact text and code', (_, ttl) => {
      const error = configErrorOf({ redis: () => server.client(), ttl });
      expect(error.message).toEqual(
        refusedWith('cache_lock ttl must be a positive number of seconds'),
      );
      expect(error.code).toBe('redis_ttl_invalid');
      expect(error.violations.map((v) => v.property)).toEqual(['ttl']);
    });
  });

  describe('accepted values', () => {
    it.each([
      [0.5, 0.5],
      [60, 60],
      [0.0001, 0.0001],
      ['30', 30],
      ['0.25', 0.25],
    ])('ttl %j is accepted and read as %d seconds', (ttl, seconds) => {
      const lock = new RedisLockService({
        redis: () => server.client(),
        ttl: ttl as number,
      });
      expect(lock.ttl).toBe(seconds);
      expect(typeof lock.ttl).toBe('number');
    });

    it('a factory is accepted and not called by new', () => {
      const factory = vi.fn(() => server.client());
      const lock = new RedisLockService({ redis: factory, namespace: NS });
      expect(lock.redis).toBe(factory);
      expect(factory).not.toHaveBeenCalled();
    });

    it('an async factory is accepted and not called by new', () => {
      const factory = vi.fn(async () => server.client());
      const lock = new RedisLockService({ redis: factory });
      expect(lock.redis).toBe(factory);
      expect(factory).not.toHaveBeenCalled();
    });

    it('a Proxy client that dispatches every method name is accepted and works', async () => {
      const real = server.client();
      const autoload = new Proxy(
        {},
        {
          get:
            (_, name) =>
            (...args: (string | number)[]) =>
              real.call(String(name), ...args),
        },
      ) as RedisScriptClient;
      const lock = new RedisLockService({ redis: autoload, namespace: NS });
      const [guard, error] = await lock.acquire('autoload');
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    });

    it('any object with an eval() method is accepted, unless it is a node-redis client', () => {
      const client = { eval: () => 1 };
      expect(new RedisLockService({ redis: client }).redis).toBe(client);
    });
  });

  describe('new connects nothing and sends no command', () => {
    it('a lazy client object is still not connected after new', async () => {
      const client = server.client({ lazyConnect: true });
      const lock = new RedisLockService({ redis: client, namespace: NS });
      await sleep(50);
      expect(client.status).toBe('wait');
      await lock.acquire('probe');
      expect(client.status).toBe('ready');
    });

    it('a connected client object is sent no command by new (INFO commandstats)', async () => {
      const client = server.client();
      await client.ping();
      await admin.config('RESETSTAT');
      const lock = new RedisLockService({ redis: client, namespace: NS });
      await sleep(50);
      // Only the admin connection's own CONFIG RESETSTAT may show; nothing from the lock.
      const sent = async (): Promise<string[]> =>
        [...(await commandStats(admin)).keys()].filter((name) => !name.startsWith('config'));
      expect(await sent()).toEqual([]);
      // The same probe does see the lock's first command.
      await lock.acquire('probe');
      expect(await sent()).toContain('set');
    });

    it('the number of client connections does not change with new and a factory', async () => {
      const before = await clientCount();
      const factory = vi.fn(makeClient);
      const lock = new RedisLockService({ redis: factory });
      await sleep(50);
      expect(await clientCount()).toBe(before);
      expect(factory).not.toHaveBeenCalled();
      await lock.acquire('probe');
      expect(await clientCount()).toBe(before + 1);
    });
  });

  describe('several violations', () => {
    it('are all listed in violations; code and first line are the first one', () => {
      const error = configErrorOf({ redis: 1, namespace: '', ttl: 0 });
      expect(error.violations).toEqual([
        {
          property: 'redis',
          code: 'redis_client_invalid',
          message: `${ENGLISH_MESSAGES.redis_client_invalid} (redis: 1)`,
          values: [{ name: 'redis', value: '1', isDefault: false }],
        },
        {
          property: 'namespace',
          code: 'redis_namespace_invalid',
          message: `${ENGLISH_MESSAGES.redis_namespace_invalid} (namespace: "")`,
          values: [{ name: 'namespace', value: '""', isDefault: false }],
        },
        {
          property: 'ttl',
          code: 'redis_ttl_invalid',
          message: `${ENGLISH_MESSAGES.redis_ttl_invalid} (ttl: 0)`,
          values: [{ name: 'ttl', value: '0', isDefault: false }],
        },
      ]);
      expect(error.code).toBe('redis_client_invalid');
      expect(error.message.split('\n')).toEqual(error.violations.map((v) => v.message));
    });
  });

  describe('options that cannot be read', () => {
    it.each(['redis', 'namespace', 'ttl', 'messages', 'fencing', 'connectTimeout'])(
      'a getter for %s that throws is that option refused, in its own words',
      (name) => {
        const others = name === 'redis' ? {} : { redis: makeClient };
        const error = configErrorOf(throwing(name, others));
        expect(error.violations.map((v) => v.property)).toEqual([name]);
        expect(error.code).toBe(
          name === 'redis'
            ? 'redis_client_invalid'
            : name === 'connectTimeout'
              ? 'redis_connect_timeout_invalid'
              : `redis_${name}_invalid`,
        );
      },
    );

    it('an option whose value is a Proxy with throwing traps is refused, in its own words', () => {
      const hostile = new Proxy(
        {},
        {
          get: () => {
            throw new Error('get');
          },
          getPrototypeOf: () => {
            throw new Error('getPrototypeOf');
          },
          ownKeys: () => {
            throw new Error('ownKeys');
          },
        },
      );
      expect(configErrorOf({ redis: makeClient, messages: hostile }).code).toBe(
        'redis_messages_invalid',
      );
      expect(configErrorOf({ redis: hostile }).code).toBe('redis_client_invalid');
    });

    it('an options object whose traps all throw is read as no options: redis_client_invalid', () => {
      const hostile = new Proxy(
        {},
        {
          get: () => {
            throw new Error('get');
          },
          ownKeys: () => {
            throw new Error('ownKeys');
          },
        },
      );
      expect(configErrorOf(hostile).violations.map((v) => v.code)).toEqual([
        'redis_client_invalid',
      ]);
    });
  });
});
