/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import {
  Controller,
  Get,
  Injectable,
  Module,
  Param,
  UseInterceptors,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterEach, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferCacheInterceptor,
  BufferLockModule,
  Cached,
  ENGLISH_MESSAGES,
  RedisLockService,
  SingleFlight,
  type BufferLockOptions,
} from '../../lib/index.js';
import type { MemoryClient } from '../../lib/memory/memory-client.js';
import { MemoryLogger } from '../support/nest-helpers.js';

/**
 * A Nest app on `BufferLockModule.forRoot({ redis: 'memory://' })`, as a user's unit tests run it
 * with `REDIS_URL=memory://`: no Redis anywhere, and `@Cached`, `@SingleFlight`, `BufferCache`
 * and `BufferCacheInterceptor` behave as they do on Redis, for this process.
 */

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const counts = { builds: 0, flights: 0, routes: 0 };

@Injectable()
class Reports {
  @Cached((id: string) => `report:${id}`, { ttl: 0.2 })
  async build(id: string): Promise<{ id: string; build: number }> {
    await sleep(20);
    return { id, build: ++counts.builds };
  }

  @SingleFlight((id: string) => `nightly:${id}`)
  async nightly(id: string): Promise<string> {
    counts.flights++;
    await sleep(20);
    return `nightly ${id}`;
  }
}

@Controller('items')
@UseInterceptors(BufferCacheInterceptor)
class ItemsController {
  @Get(':id')
  async item(@Param('id') id: string): Promise<{ id: string; route: number }> {
    await sleep(10);
    return { id, route: ++counts.routes };
  }
}

let app: INestApplication | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
  Object.assign(counts, { builds: 0, flights: 0, routes: 0 });
});

async function start(
  module: ReturnType<typeof BufferLockModule.forRoot | typeof BufferLockModule.forRootAsync>,
): Promise<INestApplication> {
  @Module({ imports: [module], providers: [Reports], controllers: [ItemsController] })
  class AppModule {}
  const testing = await Test.createTestingModule({ imports: [AppModule] }).compile();
  app = testing.createNestApplication({ logger: false });
  await app.init();
  return app;
}

const options = (logger: MemoryLogger): BufferLockOptions => ({
  redis: 'memory://',
  logger,
});

describe("BufferLockModule.forRoot({ redis: 'memory://' })", () => {
  it('logs once at start-up that it coordinates this process only', async () => {
    const logger = new MemoryLogger();
    await start(BufferLockModule.forRoot(options(logger)));
    expect(logger.lines).toEqual([{ level: 'log', text: ENGLISH_MESSAGES.memory_backend }]);
  });

  it('forRootAsync logs it once too, in the locale chosen', async () => {
    const logger = new MemoryLogger();
    await start(
      BufferLockModule.forRootAsync({
        useFactory: () => ({
          ...options(logger),
          locale: 'de',
          catalogs: { de: { memory_backend: 'Nur dieser Prozess wird koordiniert' } },
        }),
      }),
    );
    expect(logger.lines).toEqual([{ level: 'log', text: 'Nur dieser Prozess wird koordiniert' }]);
  });

  it('@Cached: 20 concurrent calls build once, later calls hit, and the entry expires after its ttl', async () => {
    const reports = (await start(BufferLockModule.forRoot(options(new MemoryLogger())))).get(
      Reports,
    );
    const first = await Promise.all(Array.from({ length: 20 }, () => reports.build('7')));
    expect(first).toEqual(Array.from({ length: 20 }, () => ({ id: '7', build: 1 })));
    expect(await reports.build('7')).toEqual({ id: '7', build: 1 });
    await sleep(250);
    expect(await reports.build('7')).toEqual({ id: '7', build: 2 });
    expect(counts.builds).toBe(2);
  });

  it('@SingleFlight: 20 concurrent calls run once and all get its value', async () => {
    const reports = (await start(BufferLockModule.forRoot(options(new MemoryLogger())))).get(
      Reports,
    );
    const results = await Promise.all(Array.from({ length: 20 }, () => reports.nightly('x')));
    expect(results).toEqual(Array(20).fill('nightly x'));
    expect(counts.flights).toBe(1);
  });

  it('BufferCache keeps entries on the lock’s own in-memory client', async () => {
    const started = await start(BufferLockModule.forRoot(options(new MemoryLogger())));
    const cache = started.get(BufferCache);
    let builds = 0;
    const build = async (): Promise<number> => ++builds;
    expect(await cache.getOrSet('totals', build)).toBe(1);
    expect(await cache.getOrSet('totals', build)).toBe(1);
    await cache.set('set-by-hand', { ok: true });
    expect(await cache.get('set-by-hand')).toEqual({ ok: true });
    await cache.delete('totals');
    expect(await cache.getOrSet('totals', build)).toBe(2);
    const client = (await started.get(RedisLockService).getClient()) as MemoryClient;
    // Two entries (with the keys of their locks' slots); no lock is left behind.
    expect(await client.dbsize()).toBe(2);
  });

  it('BufferCacheInterceptor: MISS then HIT over HTTP', async () => {
    const started = await start(BufferLockModule.forRoot(options(new MemoryLogger())));
    const server = started.getHttpServer();
    // supertest serves each request on a port of its own: one Host for both, as behind one name.
    const get = () => request(server).get('/items/a').set('Host', 'app.example');
    const replies = [await get(), await get()];
    expect(replies.map((reply) => [reply.headers['x-cache'], reply.body])).toEqual([
      ['MISS', { id: 'a', route: 1 }],
      ['HIT', { id: 'a', route: 1 }],
    ]);
  });

  it('closes its in-memory client at shutdown', async () => {
    const started = await start(BufferLockModule.forRoot(options(new MemoryLogger())));
    await started.get(Reports).nightly('before shutdown');
    const client = (await started.get(RedisLockService).getClient()) as MemoryClient;
    expect(await client.ping()).toBe('PONG');
    await started.close();
    app = undefined;
    await expect(client.ping()).rejects.toThrow('Connection is closed.');
  });
});
