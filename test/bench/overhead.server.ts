// The HTTP app of the decorator-overhead benchmark, in its own process so that autocannon (in the
// parent) does not share its event loop. Routes `/:work/bare/:id`, `/:work/floor/:id` and
// `/:work/single-flight/:id` run the same handler body: bare; between a SET NX PX and a DEL by hand
// (the floor: the same two round trips with no library); and under @SingleFlight on a per-request
// key. `work` picks the body (see WORKS). Sends its port over IPC once listening.
import 'reflect-metadata';
import { Controller, Get, Module, Param } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Redis, type RedisOptions } from 'ioredis';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { decorate, singleFlightApi } from './features.js';
import { OVERHEAD_CACHE_TTL_SECONDS, type OverheadWork } from './overhead.protocol.js';

const port = Number(process.env['BENCH_REDIS_PORT']);
// Section 6 runs this app under valgrind, many times slower, where a command can take longer than
// the fail-fast 1 s: it sets a longer commandTimeout for both lock clients, so that no call is
// counted on the timeout or fail-open path.
const commandTimeout = process.env['BENCH_COMMAND_TIMEOUT_MS']
  ? { commandTimeout: Number(process.env['BENCH_COMMAND_TIMEOUT_MS']) }
  : {};
// The module builds the lock's client from the URL (or options), with its client defaults.
const redis =
  'commandTimeout' in commandTimeout
    ? { host: '127.0.0.1', port, ...commandTimeout }
    : `redis://127.0.0.1:${port}`;
// The app's own cache client on the same Redis, as a cached endpoint has next to the lock's.
const cache = new Redis({ host: '127.0.0.1', port });

interface Item {
  readonly id: string;
  readonly name?: string;
  readonly builtAt?: number;
}

/** Read-through cache: GET the entry; on a miss build a small value and SET it with a TTL. */
async function cachedItem(id: string): Promise<Item> {
  const key = `cache:item:${id}`;
  const hit = await cache.get(key);
  if (hit !== null) return JSON.parse(hit) as Item;
  const item: Item = { id, name: `item ${id}`, builtAt: Date.now() };
  await cache.set(key, JSON.stringify(item), 'EX', OVERHEAD_CACHE_TTL_SECONDS);
  return item;
}

const WORKS: Record<OverheadWork, (id: string) => Item | Promise<Item>> = {
  // Nothing but the answer: the decorator's two round trips against no work at all.
  empty: (id) => ({ id }),
  cached: cachedItem,
};

// The floor route's client: the settings the module gives its own.
let floorClient: Redis | undefined;

function work(kind: string, id: string): Item | Promise<Item> {
  const body = WORKS[kind as OverheadWork];
  if (!body) throw new Error(`unknown work ${kind}`);
  return body(id);
}

@Controller()
class ItemsController {
  @Get(':work/bare/:id')
  bare(@Param('work') kind: string, @Param('id') id: string): Item | Promise<Item> {
    return work(kind, id);
  }

  @Get(':work/floor/:id')
  async floor(@Param('work') kind: string, @Param('id') id: string): Promise<Item> {
    const key = `bench:http:floor:${id}`;
    if ((await floorClient!.set(key, '1', 'PX', 60_000, 'NX')) !== 'OK') {
      throw new Error(`floor: ${key} is taken`);
    }
    try {
      return await work(kind, id);
    } finally {
      await floorClient!.del(key);
    }
  }

  @Get(':work/single-flight/:id')
  singleFlight(@Param('work') kind: string, @Param('id') id: string): Item | Promise<Item> {
    return work(kind, id);
  }
}

async function main(): Promise<void> {
  const api = await singleFlightApi();
  if (!api) {
    process.send!({ type: 'unavailable' });
    return;
  }
  floorClient = new Redis({
    host: '127.0.0.1',
    port,
    ...((api.lib['FAIL_FAST_CLIENT_DEFAULTS'] as RedisOptions | undefined) ??
      FAIL_FAST_CLIENT_DEFAULTS),
    ...commandTimeout,
    lazyConnect: true,
  });
  await floorClient.connect();
  // Applied after @Get: the decorator copies the route metadata onto its wrapper.
  decorate(
    ItemsController.prototype,
    'singleFlight',
    api.SingleFlight((_kind: string, id: string) => `item:${id}`),
  );
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const AppModule = class {};
  Module({
    imports: [api.BufferLockModule.forRoot({ redis, namespace: 'bench:http:' })],
    controllers: [ItemsController],
  })(AppModule);
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  process.send!({ type: 'listening', port: address.port });
  process.on(
    'message',
    () =>
      void app
        .close()
        .then(() => Promise.all([cache.quit(), floorClient?.quit()]))
        .finally(() => process.exit(0)),
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
