import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockMessages,
  BufferLockModule,
  Cached,
  RedisLockService,
  SingleFlight,
  type BufferLockOptions,
  type ResolvedBufferLockOptions,
} from '../../lib/index.js';
import { BUFFER_LOCK_OPTIONS } from '../../lib/options/buffer-lock.constants.js';
import { CacheOptionsDto } from '../../lib/options/cache.options.js';
import { optionNames, Rule, validateOptions } from '../../lib/options/validate-options.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * An option given as `undefined` is not given, at every level; a name no options class declares
 * is refused by name, at bootstrap and per call, nested ones included.
 */

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const NS = 'test:options:';

/** What booting the module with `options` gives: its resolved options, or the error. */
async function boot(
  options: unknown,
  async = false,
): Promise<ResolvedBufferLockOptions | BufferLockConfigError> {
  const module = async
    ? BufferLockModule.forRootAsync({ useFactory: () => options as BufferLockOptions })
    : BufferLockModule.forRoot(options as BufferLockOptions);
  try {
    const app = await Test.createTestingModule({ imports: [module] }).compile();
    const resolved = app.get<ResolvedBufferLockOptions>(BUFFER_LOCK_OPTIONS);
    const lock = app.get(RedisLockService);
    const [guard, error] = await lock.acquire('booted');
    expect(error).toBeUndefined();
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    await lock.release(guard!);
    await app.close();
    return resolved;
  } catch (error) {
    expect(error).toBeInstanceOf(BufferLockConfigError);
    return error as BufferLockConfigError;
  }
}

/** `[property, code, message]` of each violation. */
const violations = (error: unknown): [string, string, string][] => {
  expect(error).toBeInstanceOf(BufferLockConfigError);
  return (error as BufferLockConfigError).violations.map((v) => [v.property, v.code, v.message]);
};
const unknown = (property: string, name = property): [string, string, string] => [
  property,
  'option_unknown',
  `cache_lock ${name} is not an option here; check its spelling`,
];
const thrown = (run: () => unknown): unknown => {
  try {
    run();
  } catch (error) {
    return error;
  }
  throw new Error('did not throw');
};

describe('undefined is "not given", at every level', () => {
  it.each([false, true])(
    'forRoot (async: %s): top-level and nested undefined take the defaults',
    async (async) => {
      const resolved = await boot(
        {
          redis: () => server.client(),
          namespace: `${NS}given:`,
          ttl: undefined,
          lockTimeout: undefined,
          logger: undefined,
          locale: undefined,
          circuitBreaker: { failureThreshold: undefined, openSeconds: undefined, probes: 2 },
          cacheDefaults: { ttl: undefined, grace: undefined, hardTimeout: undefined, timeout: 1 },
        },
        async,
      );
      expect(resolved).not.toBeInstanceOf(BufferLockConfigError);
      expect(resolved).toMatchObject({
        namespace: `${NS}given:`,
        ttl: 60,
        lockTimeout: 10,
        locale: 'en',
        circuitBreaker: { failureThreshold: 5, openSeconds: 10, probes: 2 },
        cacheDefaults: { ttl: 60, grace: 0, timeout: 1, hardTimeout: 60 },
      });
    },
  );

  it('circuitBreaker and cacheDefaults themselves undefined take their defaults', async () => {
    const resolved = await boot({
      redis: () => server.client(),
      namespace: NS,
      circuitBreaker: undefined,
      cacheDefaults: undefined,
    });
    expect(resolved).toMatchObject({
      circuitBreaker: { failureThreshold: 5, openSeconds: 10, probes: 1 },
      cacheDefaults: { ttl: 60, grace: 0, timeout: 0, hardTimeout: 60, maxValueBytes: 4194304 },
    });
  });

  it('new RedisLockService(), a call of getOrSet, @Cached and @SingleFlight take undefined as not given', async () => {
    const lock = new RedisLockService({
      redis: () => server.client(),
      namespace: undefined,
      ttl: undefined,
      connectTimeout: undefined,
    });
    expect([lock.namespace, lock.ttl]).toEqual(['buffer:lock:', 60]);
    const cache = new BufferCache({ lock, options: { cacheDefaults: { grace: undefined } } });
    const options = { ttl: undefined, grace: undefined, maxValueBytes: undefined };
    expect(await cache.getOrSet('given:1', () => 'built', options)).toBe('built');
    expect(await cache.getOrSet('given:1', () => 'again', options)).toBe('built');
    expect(() => Cached('k', { ttl: undefined, hardTimeout: undefined })).not.toThrow();
    expect(() => SingleFlight('k', { ttl: undefined, onBusy: undefined })).not.toThrow();
  });

  it('redis undefined is still missing', async () => {
    expect(violations(await boot({ redis: undefined }))[0]![1]).toBe('module_redis_invalid');
  });
});

describe('a name no options class declares is refused by name', () => {
  it.each([false, true])(
    'at bootstrap (async: %s): top level, in circuitBreaker and in cacheDefaults',
    async (async) => {
      const error = await boot(
        {
          redis: () => server.client(),
          tll: 60,
          circuitBreaker: { failureTreshold: 3 },
          cacheDefaults: { grase: 5, ttl: 30 },
        },
        async,
      );
      expect(violations(error)).toEqual([
        unknown('tll'),
        unknown('circuitBreaker', 'circuitBreaker.failureTreshold'),
        unknown('cacheDefaults', 'cacheDefaults.grase'),
      ]);
    },
  );

  it('new RedisLockService(): a module option is none of the lock service', () => {
    const error = thrown(
      () => new RedisLockService({ redis: () => server.client(), lockTimeout: 5 } as never),
    );
    expect(violations(error)).toEqual([unknown('lockTimeout')]);
    expect((error as BufferLockConfigError).code).toBe('option_unknown');
  });

  it('getOrSet and set, also after the same values without the name were taken', async () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
    const cache = new BufferCache({ lock });
    expect(await cache.getOrSet('unknown:1', () => 1, { ttl: 30 })).toBe(1);
    for (const options of [{ ttl: 30, tll: 30 }, { tll: 30 }, { ttl: 30, 'ttl:30|': 1 }]) {
      const refused = await cache.getOrSet('unknown:1', () => 2, options as never).catch((e) => e);
      expect(violations(refused)).toEqual([unknown(Object.keys(options).at(-1)!)]);
      expect(violations(await cache.set('unknown:2', 1, options as never).catch((e) => e))).toEqual(
        [unknown(Object.keys(options).at(-1)!)],
      );
    }
    expect(await cache.get('unknown:2')).toBeUndefined();
  });

  it('@Cached and @SingleFlight when the class is defined; a module option is no per-call one', () => {
    expect(violations(thrown(() => Cached('k', { tll: 5 } as never)))).toEqual([unknown('tll')]);
    expect(
      violations(thrown(() => SingleFlight('k', { onBusy: 'skip', tll: 1 } as never))),
    ).toEqual([unknown('tll')]);
    expect(violations(thrown(() => SingleFlight('k', { namespace: 'x' } as never)))).toEqual([
      unknown('namespace'),
    ]);
  });

  it('the engine and the cache made without the module', () => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace: NS });
    const error = thrown(() => new BufferCache({ lock, options: { cacheDefault: {} } as never }));
    expect(violations(error)).toEqual([unknown('cacheDefault')]);
  });
});

describe('the known names come from the options classes', () => {
  // A field another version adds: one with a default and no rule, one with a rule and no default.
  class WiderOptionsDto extends CacheOptionsDto {
    http?: object = undefined;
    @Rule('cache_ttl_invalid', (v) => v === undefined || typeof v === 'string')
    label?: string;
  }

  it('a field with a default or a rule, base classes included, is known; others are refused', () => {
    const messages = new BufferLockMessages();
    expect([...optionNames(WiderOptionsDto)].toSorted()).toEqual(
      [...optionNames(CacheOptionsDto), 'http', 'label'].toSorted(),
    );
    expect(optionNames(CacheOptionsDto)).toEqual(new Set(Object.keys(new CacheOptionsDto())));
    const taken = validateOptions(WiderOptionsDto, { http: {}, label: 'x', ttl: '5' }, messages);
    expect(taken).toMatchObject({ http: {}, label: 'x', ttl: 5, grace: 0 });
    const error = thrown(() => validateOptions(WiderOptionsDto, { htp: {} }, messages));
    expect(violations(error)).toEqual([unknown('htp')]);
  });
});
