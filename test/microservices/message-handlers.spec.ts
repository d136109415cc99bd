import {
  Catch,
  Controller,
  Module,
  UseFilters,
  UseInterceptors,
  type ExecutionContext,
  type INestMicroservice,
  type RpcExceptionFilter,
} from '@nestjs/common';
import { CacheKey } from '@nestjs/cache-manager';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  EventPattern,
  MessagePattern,
  Payload,
  Transport,
  type ClientProxy,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import { interval, lastValueFrom, map, take, throwError, toArray, type Observable } from 'rxjs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  BufferCacheInterceptor,
  BufferLockModule,
  Cached,
  CacheEvict,
  Idempotent,
  LockBusyError,
  RedisUnavailableError,
  SingleFlight,
} from '../../lib/index.js';
import { AMQP_URL, NATS_URL, requireBroker } from '../support/brokers.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * The cache and the lock on message handlers, over a real broker (NATS, and RabbitMQ): a
 * `@MessagePattern` reply cached by `BufferCacheInterceptor` by its pattern and data, built once
 * for concurrent identical requests and never for an event; `@Cached`, `@CacheEvict` and
 * `@SingleFlight` on handlers as on any method; a busy lock's refusal reaches the client in its
 * own words through an exception filter.
 */

let runs = 0;
let gate = deferred();

interface Quote {
  readonly sku: string;
  readonly run: number;
}

/** What the docs recommend: the lock's HTTP exceptions, sent to an RPC client as their bodies. */
@Catch(LockBusyError, RedisUnavailableError)
class LockErrorsFilter implements RpcExceptionFilter<LockBusyError | RedisUnavailableError> {
  catch(error: LockBusyError | RedisUnavailableError): Observable<never> {
    return throwError(() => error.getResponse());
  }
}

@Controller()
@UseFilters(LockErrorsFilter)
class PricesController {
  @MessagePattern('price')
  @UseInterceptors(BufferCacheInterceptor)
  async price(@Payload() data: { sku: string }): Promise<Quote> {
    const run = ++runs;
    await gate.promise;
    return { sku: data.sku, run };
  }

  @MessagePattern('fail-once')
  @UseInterceptors(BufferCacheInterceptor)
  failOnce(@Payload() data: { sku: string }): Quote {
    if (++runs === 1) throw new Error('the price list is being reloaded');
    return { sku: data.sku, run: runs };
  }

  @MessagePattern('ticks')
  @UseInterceptors(BufferCacheInterceptor)
  ticks(): Observable<number> {
    runs++;
    return interval(5).pipe(
      take(3),
      map((i) => i + 1),
    );
  }

  @MessagePattern({ cmd: 'list-price' })
  @UseInterceptors(BufferCacheInterceptor)
  listPrice(@Payload() data: { sku: string }): string {
    return `list ${data.sku} ${++runs}`;
  }

  @MessagePattern({ cmd: 'sale-price' })
  @UseInterceptors(BufferCacheInterceptor)
  salePrice(@Payload() data: { sku: string }): string {
    return `sale ${data.sku} ${++runs}`;
  }

  @MessagePattern('named')
  @UseInterceptors(BufferCacheInterceptor)
  @CacheKey('named-quote')
  named(@Payload() data: { sku: string }): Quote {
    return { sku: data.sku, run: ++runs };
  }

  @MessagePattern('region-price')
  @UseInterceptors(BufferCacheInterceptor)
  @CacheKey(
    (context: ExecutionContext) =>
      `region:${context.switchToRpc().getData<{ region: string }>().region}`,
  )
  regionPrice(@Payload() data: { sku: string }): Quote {
    return { sku: data.sku, run: ++runs };
  }

  @EventPattern('price.viewed')
  @UseInterceptors(BufferCacheInterceptor)
  viewed(@Payload() view: { sku: string }): string {
    return `${view.sku}:${++runs}`;
  }

  @MessagePattern('stock')
  @Cached((data: { sku: string }) => `stock:${data.sku}`, { ttl: 60 })
  async stock(data: { sku: string }): Promise<Quote> {
    return { sku: data.sku, run: ++runs };
  }

  @MessagePattern('restock')
  @CacheEvict((data: { sku: string }) => `stock:${data.sku}`)
  async restock(data: { sku: string }): Promise<string> {
    return data.sku;
  }

  @MessagePattern('charge')
  @Idempotent({ key: (context) => context.switchToRpc().getData<{ id: string }>().id })
  charge(@Payload() data: { id: string; cents: number }): { id: string; run: number } {
    return { id: data.id, run: ++runs };
  }

  @MessagePattern('keyless')
  @Idempotent()
  keyless(@Payload() data: { id: string }): string {
    return data.id;
  }

  @MessagePattern('reindex')
  @SingleFlight('reindex', { onBusy: 'throw' })
  async reindex(): Promise<number> {
    const run = ++runs;
    await gate.promise;
    return run;
  }
}

@Module({ controllers: [PricesController] })
class PricesModule {}

let redis: RedisServer;
beforeAll(async () => {
  await requireBroker(NATS_URL);
  await requireBroker(AMQP_URL);
  redis = await startRedis();
}, 60_000);
afterAll(async () => {
  await redis?.stop();
});

const transports = [
  {
    name: 'NATS',
    server: (channel: string): MicroserviceOptions => ({
      transport: Transport.NATS,
      options: { servers: [NATS_URL], queue: channel },
    }),
    client: (): ClientProxy =>
      ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } }),
  },
  {
    name: 'RabbitMQ',
    server: (channel: string): MicroserviceOptions => ({
      transport: Transport.RMQ,
      options: { urls: [AMQP_URL], queue: channel, queueOptions: { durable: false } },
    }),
    client: (channel: string): ClientProxy =>
      ClientProxyFactory.create({
        transport: Transport.RMQ,
        options: { urls: [AMQP_URL], queue: channel, queueOptions: { durable: false } },
      }),
  },
];

describe.each(transports)('message handlers over $name', (transport) => {
  const channel = `prices-${transport.name}-${process.pid}-${Date.now()}`;
  let app: INestMicroservice;
  let client: ClientProxy;
  const ask = <T>(pattern: string | object, data: object): Promise<T> =>
    lastValueFrom(client.send<T>(pattern, data));

  beforeAll(async () => {
    @Module({
      imports: [
        BufferLockModule.forRoot({
          redis: redis.url,
          namespace: `test:messages:${transport.name}:`,
          isGlobal: true,
          logger: { log() {}, warn() {}, error() {} },
        }),
        PricesModule,
      ],
    })
    class AppModule {}
    app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
      ...transport.server(channel),
      logger: false,
    });
    await app.listen();
    client = transport.client(channel);
    await client.connect();
  }, 30_000);
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });
  beforeEach(() => {
    runs = 0;
    gate = deferred();
    gate.resolve();
  });

  it('builds a reply once for 20 concurrent identical requests, and answers a later one without the handler', async () => {
    gate = deferred();
    const sku = `a-${Date.now()}`;
    const replies = Promise.all(Array.from({ length: 20 }, () => ask<Quote>('price', { sku })));
    await until(() => runs > 0);
    gate.resolve();
    expect(await replies).toEqual(Array.from({ length: 20 }, () => ({ sku, run: 1 })));
    expect(await ask<Quote>('price', { sku })).toEqual({ sku, run: 1 });
    expect(runs).toBe(1);
  });

  it('keys a reply by its pattern and its data: other data is another entry', async () => {
    const stamp = Date.now();
    const a = await ask<Quote>('price', { sku: `a-${stamp}` });
    const b = await ask<Quote>('price', { sku: `b-${stamp}` });
    const named = await ask<Quote>('named', { sku: `a-${stamp}` });
    const namedOther = await ask<Quote>('named', { sku: `b-${stamp}` });
    expect([a.run, b.run, named.run]).toEqual([1, 2, 3]);
    // `@CacheKey()` names one entry for every message of its handler.
    expect(namedOther).toEqual(named);
  });

  it('keys a reply by what a @CacheKey() function of its context returns', async () => {
    const region = `eu-${Date.now()}`;
    const first = await ask<Quote>('region-price', { sku: 'a', region });
    const sameRegion = await ask<Quote>('region-price', { sku: 'b', region });
    const otherRegion = await ask<Quote>('region-price', { sku: 'a', region: `us-${region}` });
    expect([first.run, sameRegion.run, otherRegion.run]).toEqual([1, 1, 2]);
  });

  it('keys object patterns apart: two handlers given the same data keep their own replies', async () => {
    const sku = `o-${Date.now()}`;
    const list = await ask<string>({ cmd: 'list-price' }, { sku });
    const sale = await ask<string>({ cmd: 'sale-price' }, { sku });
    expect([list, sale]).toEqual([`list ${sku} 1`, `sale ${sku} 2`]);
  });

  it('never caches an event: each one runs its handler', async () => {
    for (let i = 0; i < 3; i++) client.emit('price.viewed', { sku: 'a' });
    await until(() => runs === 3);
    expect(runs).toBe(3);
  });

  it("sends a handler's error to its caller and caches nothing: the next request runs", async () => {
    const sku = `f-${Date.now()}`;
    const failed = await ask<Quote>('fail-once', { sku }).catch((error: unknown) => error);
    expect(failed).toMatchObject({ status: 'error' });
    expect(await ask<Quote>('fail-once', { sku })).toEqual({ sku, run: 2 });
    expect(await ask<Quote>('fail-once', { sku })).toEqual({ sku, run: 2 });
  });

  it('sends a reply that streams as it comes, every time: it is not cached', async () => {
    const first = await lastValueFrom(client.send<number>('ticks', {}).pipe(toArray()));
    const second = await lastValueFrom(client.send<number>('ticks', {}).pipe(toArray()));
    expect(transport.name === 'NATS' ? [first, second] : [first.at(-1), second.at(-1)]).toEqual(
      transport.name === 'NATS'
        ? [
            [1, 2, 3],
            [1, 2, 3],
          ]
        : [3, 3],
    );
    expect(runs).toBe(2);
  });

  it('@Cached and @CacheEvict work on message handlers as on any method', async () => {
    const sku = `s-${Date.now()}`;
    const first = await ask<Quote>('stock', { sku });
    const hit = await ask<Quote>('stock', { sku });
    await ask<string>('restock', { sku });
    const rebuilt = await ask<Quote>('stock', { sku });
    expect([first.run, hit.run, rebuilt.run]).toEqual([1, 1, 2]);
  });

  it('@Idempotent processes a message key once: a redelivery gets the kept reply, another message with the key an error', async () => {
    const id = `c-${Date.now()}`;
    const first = await ask<object>('charge', { id, cents: 5 });
    const again = await ask<object>('charge', { id, cents: 5 });
    const other = await ask<object>('charge', { id, cents: 6 }).catch((error: unknown) => error);
    const keyless = await ask<object>('keyless', { id }).catch((error: unknown) => error);
    expect([first, again]).toEqual([
      { id, run: 1 },
      { id, run: 1 },
    ]);
    expect(other).toEqual({
      statusCode: 422,
      code: 'idempotency_message_key_reused',
      message:
        'This key of PricesController.charge was used for another message; a new message needs a new key',
    });
    expect(keyless).toMatchObject({ statusCode: 400, code: 'idempotency_message_key_missing' });
    expect(runs).toBe(1);
  });

  it("@SingleFlight with onBusy: 'throw' refuses a concurrent request in the lock's words", async () => {
    gate = deferred();
    const first = ask<number>('reindex', {});
    await until(() => runs > 0);
    const busy = await ask<number>('reindex', {}).catch((error: unknown) => error);
    gate.resolve();
    expect(await first).toBe(1);
    expect(busy).toEqual({
      statusCode: 409,
      code: 'lock_busy',
      message: 'This entry is being built by another worker; try again shortly',
    });
    expect(runs).toBe(1);
  });
});
