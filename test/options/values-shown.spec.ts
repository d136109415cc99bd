import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  CacheEvict,
  Cached,
  ENGLISH_MESSAGES,
  RedisLockService,
  type BufferLockOptions,
} from '../../lib/index.js';
import { SHOWN_VALUE_MAX, shownValue } from '../../lib/options/shown-value.js';

/**
 * A refused option says what it was given: the catalog's text stays whole, and after it come the
 * values the rule read, each as given (quoted, control characters escaped, a URL's password
 * hidden, cut to a bound) or as the default in effect where the app left it out. The same values
 * are in the error's `violations`.
 */

async function bootError(options: BufferLockOptions): Promise<BufferLockConfigError> {
  const error = await Test.createTestingModule({ imports: [BufferLockModule.forRoot(options)] })
    .compile()
    .then(
      () => undefined,
      (e: unknown) => e,
    );
  expect(error).toBeInstanceOf(BufferLockConfigError);
  return error as BufferLockConfigError;
}

const thrown = (run: () => unknown): BufferLockConfigError => {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(BufferLockConfigError);
    return error as BufferLockConfigError;
  }
  throw new Error('did not throw');
};

describe('a refused option names the value given', () => {
  it('ttl: "30s" shows the string given', async () => {
    const error = await bootError({ redis: 'memory://', ttl: '30s' as never });
    expect(error.message).toBe(`${ENGLISH_MESSAGES.redis_ttl_invalid} (ttl: "30s")`);
    expect(error.violations[0]!.values).toEqual([
      { name: 'ttl', value: '"30s"', isDefault: false },
    ]);
  });

  it('{ ttl: 5 } names the lockTimeout in effect, its default of 10, beside the ttl given', async () => {
    const error = await bootError({ redis: 'memory://', ttl: 5 });
    expect(error.code).toBe('lock_timeout_not_below_ttl');
    expect(error.message).toBe(
      `${ENGLISH_MESSAGES.lock_timeout_not_below_ttl} (lockTimeout: 10, the default; ttl: 5)`,
    );
    expect(error.violations[0]!.values).toEqual([
      { name: 'lockTimeout', value: '10', isDefault: true },
      { name: 'ttl', value: '5', isDefault: false },
    ]);
  });

  it("redis: 'localhost:7101' and redis: undefined say which was given", async () => {
    const text = ENGLISH_MESSAGES.module_redis_invalid;
    expect((await bootError({ redis: 'localhost:7101' as never })).message).toBe(
      `${text} (redis: "localhost:7101")`,
    );
    expect((await bootError({ redis: undefined as never })).message).toBe(
      `${text} (redis: not given)`,
    );
  });

  it("a URL's password never shows, in the message or the violations", () => {
    const error = thrown(
      () => new RedisLockService({ redis: 'redis://app:s3cret@cache:6379' as never, ttl: -1 }),
    );
    expect(error.message).toContain(`(ttl: -1)`);
    expect(JSON.stringify(error.violations)).not.toContain('s3cret');
    expect(shownValue('rediss://app:s3cret@cache:6379/0')).toBe('"rediss://app:***@cache:6379/0"');
    expect(shownValue('redis://:s3cret@cache')).toBe('"redis://:***@cache"');
  });

  it('control characters are escaped, a long value is cut, and objects show only their kind', () => {
    expect(shownValue('a\nb\u0007')).toBe('"a\\nb\\u0007"');
    const long = shownValue('x'.repeat(500));
    expect(long).toHaveLength(SHOWN_VALUE_MAX);
    expect(long.endsWith('…')).toBe(true);
    expect(shownValue({ password: 'hunter2' })).toBe('[object]');
    expect(shownValue([1, 2, 3])).toBe('[array(3)]');
    expect(shownValue(() => 1)).toBe('[function]');
    expect(shownValue(30n)).toBe('30');
  });

  it('an option whose getter throws shows as [unreadable]', async () => {
    const options = { redis: 'memory://' } as Record<string, unknown>;
    Object.defineProperty(options, 'ttl', {
      enumerable: true,
      get() {
        throw new Error('no');
      },
    });
    const error = await bootError(options as unknown as BufferLockOptions);
    expect(error.violations[0]!.values).toEqual([
      { name: 'ttl', value: '[unreadable]', isDefault: false },
    ]);
  });

  it('a nested option is named by its path', async () => {
    const error = await bootError({ redis: 'memory://', l1: { maxAge: 'soon' as never } });
    expect(error.violations[0]!.values).toEqual([
      { name: 'l1.maxAge', value: '"soon"', isDefault: false },
    ]);
    expect(error.message).toContain('(l1.maxAge: "soon")');
  });

  it('per call: getOrSet and the decorators show what they were given', async () => {
    const cache = new BufferCache({ lock: new RedisLockService({ redis: 'memory://' }) });
    const error = await cache.getOrSet('k', () => 1, { ttl: 'soon' as never }).catch((e) => e);
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as Error).message).toContain('(ttl: "soon")');
    expect(thrown(() => Cached('')).message).toBe(
      `${ENGLISH_MESSAGES.cached_key_invalid} (key: "")`,
    );
    expect(thrown(() => CacheEvict('k', 'all' as never)).message).toBe(
      `${ENGLISH_MESSAGES.cache_evict_options_invalid} (options: "all")`,
    );
  });

  it('an unknown option is named by its text alone', async () => {
    const error = await bootError({ redis: 'memory://', tll: 30 } as never);
    expect(error.violations[0]).toMatchObject({ code: 'option_unknown', values: [] });
    expect(error.message).toBe(ENGLISH_MESSAGES.option_unknown.replace('NAME', 'tll'));
  });
});
