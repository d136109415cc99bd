// The HTTP app of the cache benchmark's hit path, in its own process so that autocannon (in the
// parent) does not share its event loop. Every route serves the same warm entry: `/aside/:id`
// reads it with an ioredis GET by hand; `/buffer-cache/:id` through BufferCache.getOrSet (with a
// per-call ttl; `/buffer-cache-defaults/:id` with none, the module's cacheDefaults);
// `/single-flight/:id` is the hand-written route under @SingleFlight on a per-request key (a lock
// and a release per request); `/interceptor/:id` is @nestjs/cache-manager's CacheInterceptor on a
// Keyv Redis store; `/buffer-interceptor/1` is BufferCacheInterceptor on its URL key. A second app
// in the same process, whose module is the same but with `l1`, serves `/cached-l1/:id` with
// @Cached: a hit there is a copy held in the process. Sends both ports over IPC once listening.
import 'reflect-metadata';
import KeyvRedis from '@keyv/redis';
import { CacheInterceptor, CacheKey, CacheModule, CacheTTL } from '@nestjs/cache-manager';
import { Controller, Get, Inject, Module, Param, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import {
  BufferCache,
  BufferCacheInterceptor,
  BufferLockModule,
  Cached,
  SingleFlight,
} from '../../lib/index.js';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { L1_MAX_AGE, type CacheServerMessage } from './cache.protocol.js';

const port = Number(process.env['BENCH_REDIS_PORT']);
const url = `redis://127.0.0.1:${port}`;
const ENTRY_TTL_S = 3600;

// The hand-written route's client has the settings the module gives its own (the same client the
// BufferCache route reads through), so that the two differ by the library's code alone.
const asideClient = new Redis({ host: '127.0.0.1', port, ...FAIL_FAST_CLIENT_DEFAULTS });

interface Item {
  readonly id: string;
  readonly name: string;
  readonly tags: readonly string[];
  readonly price: number;
  readonly builtAt: number;
}

const build = (): Item => ({
  id: 'item',
  name: 'the item every request asks for',
  tags: ['a', 'b', 'c', 'd'],
  price: 42.5,
  builtAt: Date.now(),
});

const CONSTANT: Item = build();

/** Cache-aside by hand: GET; on a miss (the first request only) build and SET. */
async function aside(): Promise<Item> {
  const text = await asideClient.get('bench:hit:aside');
  if (text !== null) return JSON.parse(text) as Item;
  const item = build();
  await asideClient.set('bench:hit:aside', JSON.stringify(item), 'EX', ENTRY_TTL_S);
  return item;
}

@Controller()
class ItemsController {
  constructor(@Inject(BufferCache) private readonly cache: BufferCache) {}

  @Get('aside/:id')
  aside(): Promise<Item> {
    return aside();
  }

  // No cache at all: the same answer every time, what Nest and HTTP alone cost (the ceiling).
  @Get('constant/:id')
  constant(): Promise<Item> {
    return Promise.resolve(CONSTANT);
  }

  @Get('buffer-cache/:id')
  bufferCache(): Promise<Item> {
    return this.cache.getOrSet('item', build, { ttl: ENTRY_TTL_S });
  }

  // Today's pattern: the whole handler (its cache-aside read) under the lock, keyed per request.
  // The same with no per-call options: the ttl comes from the module's cacheDefaults.
  @Get('buffer-cache-defaults/:id')
  bufferCacheDefaults(): Promise<Item> {
    return this.cache.getOrSet('item-defaults', build);
  }

  @Get('single-flight/:id')
  @SingleFlight((id: string) => `item:${id}`)
  singleFlight(@Param('id') _id: string): Promise<Item> {
    return aside();
  }

  @Get('interceptor/:id')
  @UseInterceptors(CacheInterceptor)
  @CacheKey('bench:hit:interceptor')
  @CacheTTL(ENTRY_TTL_S * 1000)
  interceptor(): Item {
    return build();
  }

  // Asked for at one URL: a hit is the stored response of its URL key, headers and all.
  @Get('buffer-interceptor/:id')
  @UseInterceptors(BufferCacheInterceptor)
  @CacheTTL(ENTRY_TTL_S * 1000)
  bufferInterceptor(): Item {
    return build();
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: url,
      namespace: 'bench:hit:',
      cacheDefaults: { ttl: ENTRY_TTL_S },
    }),
    CacheModule.register({ stores: [new KeyvRedis(url)] }),
  ],
  controllers: [ItemsController],
})
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
class AppModule {}

@Controller()
class L1ItemsController {
  // The same entry and ttl as the BufferCache route, through the decorator (its own key).
  @Get('cached-l1/:id')
  @Cached('item-l1', { ttl: ENTRY_TTL_S })
  async cachedL1(): Promise<Item> {
    return build();
  }
}

// The app module's BufferLockModule with `l1`: an app of its own, for the module is global.
@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: url,
      namespace: 'bench:hit:',
      cacheDefaults: { ttl: ENTRY_TTL_S },
      l1: { maxAge: L1_MAX_AGE },
    }),
  ],
  controllers: [L1ItemsController],
})
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
class L1AppModule {}

/** The port an app's HTTP server listens on. */
const portOf = (server: unknown): number =>
  (server as { address(): { port: number } }).address().port;

async function main(): Promise<void> {
  const app = await NestFactory.create(AppModule, { logger: false });
  const l1App = await NestFactory.create(L1AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  await l1App.listen(0, '127.0.0.1');
  process.send!({
    type: 'listening',
    port: portOf(app.getHttpServer()),
    l1Port: portOf(l1App.getHttpServer()),
  } satisfies CacheServerMessage);
  process.on(
    'message',
    () =>
      void Promise.all([app.close(), l1App.close()])
        .then(() => asideClient.quit())
        .finally(() => process.exit(0)),
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
