/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import { Controller, Get, Param, UseInterceptors, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferCacheInterceptor,
  BufferLockConfigError,
  BufferLockModule,
  CacheTags,
  ENGLISH_MESSAGES,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let runs = 0;

@Controller('shops')
@UseInterceptors(BufferCacheInterceptor)
@CacheTags(['shops'])
class ShopsController {
  @Get(':shop/menu')
  @CacheTags((context) => [
    `shop:${context.switchToHttp().getRequest<{ params: { shop: string } }>().params.shop}`,
  ])
  menu(@Param('shop') shop: string): { shop: string; run: number } {
    return { shop, run: ++runs };
  }

  @Get('all')
  all(): { run: number } {
    return { run: ++runs };
  }

  @Get('bad')
  @CacheTags(() => 'no array' as never)
  bad(): { run: number } {
    return { run: ++runs };
  }
}

let server: RedisServer;
let app: INestApplication;
let cache: BufferCache;

beforeAll(async () => {
  server = await startRedis();
  const moduleRef = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: server.url, l1: { maxAge: 60 } })],
    controllers: [ShopsController],
  }).compile();
  app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  cache = app.get(BufferCache);
});

afterAll(async () => {
  await app?.close();
  await server?.stop();
});

const get = async (path: string): Promise<{ run: number; cache: string }> => {
  const reply = await request(app.getHttpServer()).get(path);
  return { run: (reply.body as { run: number }).run, cache: String(reply.headers['x-cache']) };
};

describe('@CacheTags on routes of BufferCacheInterceptor', () => {
  it('a route’s tags from its context: deleteByTag makes its entry a miss, others stay', async () => {
    const a = await get('/shops/a/menu');
    const b = await get('/shops/b/menu');
    expect(await get('/shops/a/menu')).toEqual({ run: a.run, cache: 'HIT' });
    await cache.deleteByTag('shop:a');
    const again = await get('/shops/a/menu');
    expect(again.cache).toBe('MISS');
    expect(again.run).toBeGreaterThan(b.run);
    expect(await get('/shops/b/menu')).toEqual({ run: b.run, cache: 'HIT' });
  });

  it('the controller’s tags for a route without its own', async () => {
    const first = await get('/shops/all');
    expect(await get('/shops/all')).toEqual({ run: first.run, cache: 'HIT' });
    await cache.deleteByTag('shops');
    expect((await get('/shops/all')).run).toBeGreaterThan(first.run);
  });

  it('a tags function that gives no array: the handler answers, uncached', async () => {
    const first = await get('/shops/bad');
    const second = await get('/shops/bad');
    expect(second.run).toBe(first.run + 1);
  });

  it('tags that are no array of strings, nor a function, are refused when the route is defined', () => {
    for (const bad of ['shops', [''], [1], null]) {
      expect(() => CacheTags(bad as never)).toThrow(BufferLockConfigError);
      expect(() => CacheTags(bad as never)).toThrow(ENGLISH_MESSAGES.cache_tags_invalid);
    }
  });
});
