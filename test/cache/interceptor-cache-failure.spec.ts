import { Controller, Get, UseInterceptors, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * When the cache itself fails for a route (here: the answer is larger than `maxValueBytes`), the
 * interceptor answers with what the handler gave, uncached, and logs one line in the catalog's
 * words, in the module's language.
 */

let runs = 0;

@Controller('big')
@UseInterceptors(BufferCacheInterceptor)
class BigController {
  @Get()
  big(): string {
    runs++;
    return 'x'.repeat(100);
  }
}

let server: RedisServer;
let app: INestApplication;
const logger = new MemoryLogger();
beforeAll(async () => {
  server = await startRedis();
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        redis: server.url,
        logger: new MemoryLogger(),
        cacheDefaults: { maxValueBytes: 16 },
        messages: { cache_interceptor_failed: 'Le cache a échoué : ERROR' },
      }),
    ],
    controllers: [BigController],
  }).compile();
  app = ref.createNestApplication({ logger });
  await app.init();
});
afterAll(async () => {
  await app?.close();
  await server?.stop();
});

describe('BufferCacheInterceptor when the cache fails', () => {
  it("answers the handler's value, uncached, and logs the failure in the catalog's words", async () => {
    for (let i = 0; i < 2; i++) {
      const reply = await request(app.getHttpServer()).get('/big?token=sekret');
      expect([reply.status, reply.text, reply.headers['x-cache']]).toEqual([
        200,
        'x'.repeat(100),
        'MISS',
      ]);
    }
    expect(runs).toBe(2);
    const lines = logger.at('error');
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      // The entry of a URL key is the stored response: `{"b":"xx…x","at":…,"e":"W/\"…\""}`.
      expect(line).toMatch(/^Le cache a échoué : The value for .* is 167 bytes encoded/);
    }
  });
});
