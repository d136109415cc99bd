import type { Server } from 'node:http';
import { CacheModule, CacheTTL } from '@nestjs/cache-manager';
import { Controller, Get, UseInterceptors, type INestApplication, type Type } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, afterEach, beforeAll, beforeEach, describe, it } from 'vitest';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `@nestjs/cache-manager`'s own end-to-end tests of its interceptor (`tests/e2e/cache-header.spec.ts`
 * and `tests/e2e/custom-ttl.spec.ts`, with their `CustomTtlController`), each step and expectation
 * as there, with `BufferCacheInterceptor` where `CacheInterceptor` was, on a real redis-server.
 * Their app gets a fresh in-memory store for each test: here each test's app gets a namespace of
 * its own in Redis, the same fresh start. Their other end-to-end tests use the cache manager
 * alone, no interceptor.
 */

@Controller()
@CacheTTL(600)
class CustomTtlController {
  counter = 0;

  @Get()
  @CacheTTL(500)
  @UseInterceptors(BufferCacheInterceptor)
  getNumber(): number {
    return this.counter++;
  }

  @Get('/controller')
  @UseInterceptors(BufferCacheInterceptor)
  getNumberWithControllerTTL(): number {
    return this.counter++;
  }
}

let redis: RedisServer;
let apps = 0;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis.stop();
});

/** The module of their tests, `CacheModule.register()` and the controller, plus ours. */
async function customTtlApp(controller: Type): Promise<INestApplication> {
  const module = await Test.createTestingModule({
    imports: [
      CacheModule.register(),
      BufferLockModule.forRoot({ redis: () => redis.client(), namespace: `e2e:${++apps}:` }),
    ],
    controllers: [controller],
  }).compile();
  const app = module.createNestApplication({ logger: false });
  await app.init();
  return app;
}

describe('X-Cache header', () => {
  let server: Server;
  let app: INestApplication;

  beforeEach(async () => {
    app = await customTtlApp(CustomTtlController);
    server = app.getHttpServer() as Server;
  });

  it("should set X-Cache header MISS when cache wasn't hit", async () => {
    await request(server).get('/').expect('X-Cache', 'MISS');
  });

  it('should set X-Cache header HIT when cache was hit', async () => {
    await request(server).get('/').expect('X-Cache', 'MISS');
    await request(server).get('/').expect('X-Cache', 'HIT');
  });

  afterEach(async () => {
    await app.close();
  });
});

describe('Caching Custom TTL', () => {
  let server: Server;
  let app: INestApplication;

  beforeEach(async () => {
    app = await customTtlApp(CustomTtlController);
    server = app.getHttpServer() as Server;
  });

  it('should return a different value after the TTL is elapsed', async () => {
    await request(server).get('/').expect(200, '0');
    await new Promise((resolve) => setTimeout(resolve, 500));
    await request(server).get('/').expect(200, '1');
  });

  it('should return the cached value within the TTL', async () => {
    await request(server).get('/').expect(200, '0');
    await new Promise((resolve) => setTimeout(resolve, 200));
    await request(server).get('/').expect(200, '0');
  });

  it('should return a different value after the TTL of the controller is elapsed', async () => {
    await request(server).get('/controller').expect(200, '0');
    await new Promise((resolve) => setTimeout(resolve, 600));
    await request(server).get('/controller').expect(200, '1');
  });

  it('should return the cached value within the TTL of the controller', async () => {
    await request(server).get('/controller').expect(200, '0');
    await new Promise((resolve) => setTimeout(resolve, 300));
    await request(server).get('/controller').expect(200, '0');
  });

  afterEach(async () => {
    await app.close();
  });
});
