import { Controller, Get, Param, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
// Observable is imported as a value: design:returntype then names it, and the wrapper returns an Observable.
import { firstValueFrom, map, Observable, Subject, toArray } from 'rxjs';
import request from 'supertest';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BufferLockModule, RedisLockService, SingleFlight } from '../../lib/index.js';
import { lockCommands as lockCommandsOf } from '../support/command-stats.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';

/**
 * `@SingleFlight` on a controller method that returns an Observable: overlapping subscriptions in
 * one process are one flight (one Redis acquire, one run of the method), on the test's own Redis.
 * Redis commands are counted with `INFO commandstats` deltas.
 */

let server: RedisServer;
let admin: Redis;
let app: INestApplication;

@Controller('prices')
class Prices {
  runs = 0;
  keyCalls = 0;
  source = new Subject<number>();

  reset(): void {
    this.runs = 0;
    this.keyCalls = 0;
    this.source = new Subject<number>();
  }

  @Get(':id')
  @SingleFlight(function (this: Prices, id: string) {
    this.keyCalls++; // once per call of the handler, leader or follower
    return `prices:${id}`;
  })
  prices(@Param('id') id: string): Observable<{ id: string; price: number }> {
    this.runs++;
    return this.source.pipe(map((price) => ({ id, price })));
  }
}

const lockCommands = (): Promise<number> => lockCommandsOf(admin);

const lockValue = (cacheKey: string): Promise<string | null> =>
  admin.get(app.get(RedisLockService).redisKey(cacheKey));

/** Lock commands (acquire + release) of one lone subscription, measured once. */
let loneCalls: number;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        redis: server.url,
        namespace: 'test:observable:',
        logger: new MemoryLogger(),
      }),
    ],
    controllers: [Prices],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();

  const prices = app.get(Prices);
  const lone = async (): Promise<number> => {
    const before = await lockCommands();
    prices.reset();
    const values = firstValueFrom(prices.prices('lone').pipe(toArray()));
    await until(() => prices.source.observed);
    prices.source.next(1);
    prices.source.complete();
    expect(await values).toEqual([{ id: 'lone', price: 1 }]);
    await until(async () => (await lockValue('prices:lone')) === null);
    return (await lockCommands()) - before;
  };
  await lone(); // the first use of the release script also pays a NOSCRIPT fallback
  loneCalls = await lone();
  expect(loneCalls).toBeGreaterThanOrEqual(2); // at least an acquire and a release
});
afterAll(async () => {
  await app.close();
  await server.stop();
});
beforeEach(() => app.get(Prices).reset());

describe('@SingleFlight Observable: overlapping subscriptions in one process are one flight', () => {
  it('50 concurrent subscriptions: the Redis commands of one call, one run, the same values in order', async () => {
    const prices = app.get(Prices);
    const before = await lockCommands();
    const all = Array.from({ length: 50 }, () =>
      firstValueFrom(prices.prices('1').pipe(toArray())),
    );
    await until(() => prices.source.observed);
    expect(await lockValue('prices:1')).not.toBeNull();
    prices.source.next(10);
    prices.source.next(20);
    const late = firstValueFrom(prices.prices('1').pipe(toArray())); // replayed 10 and 20
    prices.source.next(30);
    prices.source.complete();
    const expected = [10, 20, 30].map((price) => ({ id: '1', price }));
    for (const values of await Promise.all([...all, late])) expect(values).toEqual(expected);
    expect(prices.runs).toBe(1);
    await until(async () => (await lockValue('prices:1')) === null);
    expect((await lockCommands()) - before).toBe(loneCalls);
  });

  it('20 concurrent HTTP requests: one run, one acquire, the same body for all', async () => {
    const prices = app.get(Prices);
    const before = await lockCommands();
    const http = app.getHttpServer();
    const replies = Array.from({ length: 20 }, () =>
      request(http)
        .get('/prices/2')
        .then((reply) => reply),
    );
    await until(() => prices.keyCalls === 20 && prices.source.observed);
    // Nest subscribes to the handler's Observable in the microtasks after the call.
    await new Promise((r) => setTimeout(r, 100));
    prices.source.next(1);
    prices.source.next(2);
    prices.source.complete();
    for (const reply of await Promise.all(replies)) {
      expect(reply.status).toBe(200);
      expect(reply.body).toEqual({ id: '2', price: 2 }); // Nest answers with the last value
    }
    expect(prices.runs).toBe(1);
    await until(async () => (await lockValue('prices:2')) === null);
    expect((await lockCommands()) - before).toBe(loneCalls);
  });

  it('an error reaches every subscriber; a subscription after it starts a new flight', async () => {
    const prices = app.get(Prices);
    const failure = new Error('feed down');
    const outcomes = Array.from({ length: 10 }, () =>
      firstValueFrom(prices.prices('3')).catch((e: unknown) => e),
    );
    await until(() => prices.source.observed);
    prices.source.error(failure);
    for (const outcome of await Promise.all(outcomes)) expect(outcome).toBe(failure);
    expect(prices.runs).toBe(1);
    await until(async () => (await lockValue('prices:3')) === null);

    prices.source = new Subject<number>();
    const next = firstValueFrom(prices.prices('3'));
    await until(() => prices.source.observed);
    prices.source.next(7);
    expect(await next).toEqual({ id: '3', price: 7 });
    expect(prices.runs).toBe(2);
  });

  it('unsubscribing every subscriber releases the lock (the key is gone from Redis)', async () => {
    const prices = app.get(Prices);
    const subscriptions = Array.from({ length: 10 }, () => prices.prices('4').subscribe());
    await until(() => prices.source.observed);
    expect(await lockValue('prices:4')).not.toBeNull();
    for (const subscription of subscriptions) subscription.unsubscribe();
    expect(prices.source.observed).toBe(false);
    await until(async () => (await lockValue('prices:4')) === null);
    expect(prices.runs).toBe(1);
  });
});
