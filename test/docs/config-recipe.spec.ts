import { Test } from '@nestjs/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  RedisLockService,
  type ResolvedBufferLockOptions,
} from '../../lib/index.js';
import { BUFFER_LOCK_OPTIONS } from '../../lib/options/buffer-lock.constants.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { AppModule } from './config-buffer-lock.js';
import { docShowsRecipe } from './recipe.js';

/**
 * The `@nestjs/config` recipe of docs/module-options.md, booted from environment variables: their
 * strings are seconds as the options read them, and a bad one is refused at bootstrap, naming it.
 */

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const ENV = ['REDIS_URL', 'LOCK_TTL', 'LOCK_TIMEOUT', 'CACHE_TTL'] as const;

async function bootWith(env: Partial<Record<(typeof ENV)[number], string>>) {
  const saved = ENV.map((name) => [name, process.env[name]] as const);
  for (const name of ENV) delete process.env[name];
  Object.assign(process.env, env);
  try {
    return await Test.createTestingModule({ imports: [AppModule] }).compile();
  } finally {
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}

describe('the @nestjs/config recipe of docs/module-options.md', () => {
  it('is the module the test runs, word for word', () => {
    const recipe = new URL('config-buffer-lock.ts', import.meta.url);
    expect(docShowsRecipe(recipe, 'docs/module-options.md')).toBe(true);
  });

  it('boots from environment strings: they resolve to seconds, and the lock lives LOCK_TTL in Redis', async () => {
    const app = await bootWith({
      REDIS_URL: server.url,
      LOCK_TTL: '30',
      LOCK_TIMEOUT: '5',
      CACHE_TTL: '120',
    });
    const options = app.get<ResolvedBufferLockOptions>(BUFFER_LOCK_OPTIONS);
    expect([options.ttl, options.lockTimeout, options.cacheDefaults.ttl]).toEqual([30, 5, 120]);
    const [guard, error] = await app.get(RedisLockService).acquire('config-recipe');
    expect(error).toBeUndefined();
    const pttl = await server.client().pttl(guard!.key);
    expect(pttl).toBeGreaterThan(29_000);
    expect(pttl).toBeLessThanOrEqual(30_000);
    await app.get(RedisLockService).release(guard!);
    expect(await app.get(BufferCache).getOrSet('config-recipe', () => 'built')).toBe('built');
    await app.close();
  });

  it('takes the defaults the recipe gives when a variable is not set', async () => {
    const app = await bootWith({ REDIS_URL: server.url });
    const options = app.get<ResolvedBufferLockOptions>(BUFFER_LOCK_OPTIONS);
    expect([options.ttl, options.lockTimeout, options.cacheDefaults.ttl]).toEqual([60, 10, 60]);
    await app.close();
  });

  it('refuses a value that is not seconds at bootstrap, naming the option and the value given', async () => {
    const error = await bootWith({ REDIS_URL: server.url, LOCK_TTL: '30s' }).catch((e) => e);
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).violations[0]).toMatchObject({
      code: 'redis_ttl_invalid',
      values: [{ name: 'ttl', value: '"30s"', isDefault: false }],
    });
  });
});
