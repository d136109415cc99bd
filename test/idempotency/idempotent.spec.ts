import {
  Body,
  Controller,
  Get,
  HttpCode,
  NotFoundException,
  Param,
  Patch,
  Post,
  Res,
  ServiceUnavailableException,
  type ExecutionContext,
} from '@nestjs/common';
import diagnostics from 'node:diagnostics_channel';
import request from 'supertest';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Idempotent } from '../../lib/index.js';
import { CHANNEL_NAMES, type FlightTrace } from '../../lib/opentelemetry/index.js';
import { closeApps, PLATFORMS, startApp, type PlatformResponse } from '../support/http-apps.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `@Idempotent` on Express and Fastify, on a real redis-server: an unsafe request runs once per
 * `Idempotency-Key`; a retry is answered with the first one's response, a reuse with another
 * request is refused (422), one sent while the first runs too (409, or it waits), and callers
 * never share a key.
 */

let runs = 0;
let gate = deferred();
const fail = { times: 0, status: 500 };

/** Throws while `fail.times` lasts: a 404 for the item, or the warehouse's 503. */
function failWhenTold(item: unknown): void {
  if (fail.times === 0) return;
  fail.times--;
  if (fail.status === 404) throw new NotFoundException(`no item ${String(item)}`);
  throw new ServiceUnavailableException('the warehouse is down');
}

interface Order {
  readonly run: number;
  readonly item: unknown;
}

const userOf = (context: ExecutionContext): string =>
  String(context.switchToHttp().getRequest<{ headers: { 'x-user'?: string } }>().headers['x-user']);

@Controller()
class OrdersController {
  @Post('orders')
  @HttpCode(201)
  @Idempotent()
  create(
    @Body() body: { item: unknown },
    @Res({ passthrough: true }) res: PlatformResponse,
  ): Order {
    const run = ++runs;
    failWhenTold(body.item);
    res.header('Location', `/orders/${run}`);
    return { run, item: body.item };
  }

  @Post('slow-orders')
  @Idempotent()
  async slow(@Body() body: { item: unknown }): Promise<Order> {
    const run = ++runs;
    await gate.promise;
    return { run, item: body.item };
  }

  @Post('waited-orders')
  @Idempotent({ onBusy: 'wait', lockTimeout: 5 })
  async waited(@Body() body: { item: unknown }): Promise<Order> {
    const run = ++runs;
    await gate.promise;
    failWhenTold(body.item);
    return { run, item: body.item };
  }

  @Patch('orders/:id')
  @Idempotent({ required: false, header: 'X-Request-Id', expiresAfter: 1 })
  update(@Param('id') id: string): object {
    return { id, run: ++runs };
  }

  @Post('remembered-errors')
  @Idempotent({ storeErrors: true })
  remembered(@Body() body: { item: unknown }): Order {
    const run = ++runs;
    failWhenTold(body.item);
    return { run, item: body.item };
  }

  @Post('user-orders')
  @Idempotent({ scope: userOf })
  byUser(@Body() body: { item: unknown }): Order {
    return { run: ++runs, item: body.item };
  }

  @Get('orders')
  @Idempotent()
  list(): object {
    return { run: ++runs };
  }
}

/** `@Idempotent` on a controller: every unsafe route of it. */
@Controller('basket')
@Idempotent()
class BasketController {
  @Post('items')
  add(@Body() body: { item: unknown }): Order {
    return { run: ++runs, item: body.item };
  }

  @Get('items')
  list(): object {
    return { run: ++runs };
  }
}

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await closeApps();
  await server.stop();
});

describe.each(PLATFORMS)('@Idempotent on $name', (platform) => {
  let url: string;
  let keys = 0;
  /** A key no other test uses. */
  const newKey = (): string => `${platform.name}-${++keys}-${Date.now()}`;
  const post = (path: string, key: string | undefined, body: object, headers = {}) => {
    const call = request(url).post(path).set(headers).send(body);
    return key === undefined ? call : call.set('Idempotency-Key', key);
  };

  beforeAll(async () => {
    const namespace = `test:idempotent:${platform.name}:`;
    ({ url } = await startApp(platform, server, [OrdersController, BasketController], {
      namespace,
    }));
  });
  beforeEach(() => {
    runs = 0;
    fail.times = 0;
    fail.status = 500;
    gate = deferred();
  });

  it('runs the first request with a key, and answers a retry with its response, marked as a replay', async () => {
    const key = newKey();
    const first = await post('/orders', key, { item: 'tea' });
    const retry = await post('/orders', key, { item: 'tea' });
    expect(first.status).toBe(201);
    expect(first.body).toEqual({ run: 1, item: 'tea' });
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(retry.status).toBe(201);
    expect(retry.body).toEqual(first.body);
    expect(retry.headers['location']).toBe('/orders/1');
    expect(retry.headers['content-type']).toBe(first.headers['content-type']);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(runs).toBe(1);
  });

  it('refuses the key reused for another body or another URL with a 422, and runs nothing', async () => {
    const key = newKey();
    await post('/orders', key, { item: 'tea' });
    const otherBody = await post('/orders', key, { item: 'coffee' });
    const otherUrl = await post('/remembered-errors', key, { item: 'tea' });
    expect([otherBody.status, otherUrl.status]).toEqual([422, 422]);
    expect(otherBody.body).toEqual({
      statusCode: 422,
      code: 'idempotency_key_reused',
      message:
        'This Idempotency-Key was used for another request; send a new key for a new request',
    });
    expect(runs).toBe(1);
  });

  it('answers a request sent while the first with its key still runs with a 409', async () => {
    const key = newKey();
    const first = post('/slow-orders', key, { item: 'tea' }).then((r) => r);
    await until(() => runs > 0);
    const duplicate = await post('/slow-orders', key, { item: 'tea' });
    gate.resolve();
    expect(duplicate.status).toBe(409);
    expect(duplicate.body).toEqual({
      statusCode: 409,
      code: 'idempotency_in_progress',
      message: 'A request with this Idempotency-Key is still being processed; try again shortly',
    });
    expect((await first).body).toEqual({ run: 1, item: 'tea' });
    expect((await post('/slow-orders', key, { item: 'tea' })).body).toEqual({
      run: 1,
      item: 'tea',
    });
    expect(runs).toBe(1);
  });

  it("with onBusy: 'wait', a request sent while the first runs waits, and gets its response", async () => {
    const key = newKey();
    const first = post('/waited-orders', key, { item: 'tea' }).then((r) => r);
    await until(() => runs > 0);
    const duplicate = post('/waited-orders', key, { item: 'tea' }).then((r) => r);
    await new Promise((resolve) => setTimeout(resolve, 100));
    gate.resolve();
    const [a, b] = await Promise.all([first, duplicate]);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.body).toEqual(a.body);
    expect(b.headers['idempotent-replayed']).toBe('true');
    expect(runs).toBe(1);
  });

  it("with onBusy: 'wait', a request that waited for a first one that failed runs itself", async () => {
    const key = newKey();
    fail.times = 1;
    const first = post('/waited-orders', key, { item: 'tea' }).then((r) => r);
    await until(() => runs > 0);
    const duplicate = post('/waited-orders', key, { item: 'tea' }).then((r) => r);
    await new Promise((resolve) => setTimeout(resolve, 100));
    gate.resolve();
    const [a, b] = await Promise.all([first, duplicate]);
    expect([a.status, b.status]).toEqual([503, 201]);
    expect(b.body).toEqual({ run: 2, item: 'tea' });
    expect(b.headers['idempotent-replayed']).toBeUndefined();
    expect(runs).toBe(2);
  });

  it('keeps keys apart by caller: the same key from another Authorization runs its own request', async () => {
    const key = newKey();
    const alice = await post('/orders', key, { item: 'tea' }, { authorization: 'Bearer alice' });
    const bob = await post('/orders', key, { item: 'tea' }, { authorization: 'Bearer bob' });
    const anonymous = await post('/orders', key, { item: 'tea' });
    const aliceAgain = await post(
      '/orders',
      key,
      { item: 'tea' },
      { authorization: 'Bearer alice' },
    );
    expect([alice.body.run, bob.body.run, anonymous.body.run]).toEqual([1, 2, 3]);
    expect(bob.headers['idempotent-replayed']).toBeUndefined();
    expect(aliceAgain.body).toEqual(alice.body);
    expect(aliceAgain.headers['idempotent-replayed']).toBe('true');
  });

  it("keeps keys apart by a scope function's answer (here, a user id)", async () => {
    const key = newKey();
    const one = await post('/user-orders', key, { item: 'tea' }, { 'x-user': 'u1' });
    const two = await post('/user-orders', key, { item: 'tea' }, { 'x-user': 'u2' });
    const oneAgain = await post('/user-orders', key, { item: 'tea' }, { 'x-user': 'u1' });
    expect([one.body.run, two.body.run, oneAgain.body.run]).toEqual([1, 2, 1]);
  });

  it('refuses a request without the key (400), or one with an empty or too long key, and runs nothing', async () => {
    const missing = await post('/orders', undefined, { item: 'tea' });
    const empty = await post('/orders', '', { item: 'tea' });
    const long = await post('/orders', 'k'.repeat(256), { item: 'tea' });
    expect([missing.status, empty.status, long.status]).toEqual([400, 400, 400]);
    expect(missing.body).toEqual({
      statusCode: 400,
      code: 'idempotency_key_missing',
      message: 'This request needs an Idempotency-Key header',
    });
    expect(long.body.code).toBe('idempotency_key_invalid');
    expect(runs).toBe(0);
    expect((await post('/orders', 'k'.repeat(255), { item: 'tea' })).status).toBe(201);
  });

  it('with required: false, runs a request without the key each time; takes its own header name', async () => {
    const bare = [await request(url).patch('/orders/7'), await request(url).patch('/orders/7')];
    expect(bare.map((r) => r.body.run)).toEqual([1, 2]);
    const key = newKey();
    const keyed = request(url).patch('/orders/7').set('X-Request-Id', key);
    const [a, b] = [
      await keyed.then((r) => r),
      await request(url).patch('/orders/7').set('X-Request-Id', key),
    ];
    expect([a.body.run, b.body.run]).toEqual([3, 3]);
    expect(b.headers['idempotent-replayed']).toBe('true');
  });

  it('replays a response for expiresAfter only: later, the key runs again', async () => {
    const key = newKey();
    const first = await request(url).patch('/orders/8').set('X-Request-Id', key);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const later = await request(url).patch('/orders/8').set('X-Request-Id', key);
    expect([first.body.run, later.body.run]).toEqual([1, 2]);
    expect(later.headers['idempotent-replayed']).toBeUndefined();
  });

  it('leaves the key free when the handler fails: the retry runs, and its success is replayed', async () => {
    const key = newKey();
    fail.times = 1;
    const failed = await post('/orders', key, { item: 'tea' });
    const retry = await post('/orders', key, { item: 'tea' });
    const again = await post('/orders', key, { item: 'tea' });
    expect([failed.status, retry.status, again.status]).toEqual([503, 201, 201]);
    expect(again.body).toEqual(retry.body);
    expect(runs).toBe(2);
  });

  it('with storeErrors, replays a 4xx error as the response; a 5xx still leaves the key free', async () => {
    const missing = newKey();
    fail.times = 1;
    fail.status = 404;
    const first = await post('/remembered-errors', missing, { item: 'tea' });
    const retry = await post('/remembered-errors', missing, { item: 'tea' });
    expect([first.status, retry.status]).toEqual([404, 404]);
    expect(retry.body).toEqual(first.body);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(runs).toBe(1);

    const down = newKey();
    fail.times = 1;
    fail.status = 503;
    const failed = await post('/remembered-errors', down, { item: 'tea' });
    const retried = await post('/remembered-errors', down, { item: 'tea' });
    expect([failed.status, retried.status]).toEqual([503, 201]);
    expect(runs).toBe(3);
  });

  it('without storeErrors, a 4xx leaves the key free too', async () => {
    const key = newKey();
    fail.times = 1;
    fail.status = 404;
    const first = await post('/orders', key, { item: 'tea' });
    const retry = await post('/orders', key, { item: 'tea' });
    expect([first.status, retry.status]).toEqual([404, 201]);
    expect(runs).toBe(2);
  });

  it("is traced as the single-flight channel's operations: the first run is one, a replay none", async () => {
    const flights: FlightTrace[] = [];
    const channel = diagnostics.tracingChannel<unknown, FlightTrace>(CHANNEL_NAMES.flight);
    const handlers = {
      start() {},
      end() {},
      asyncStart() {},
      asyncEnd: (trace: FlightTrace) => void flights.push({ ...trace }),
      error() {},
    };
    channel.subscribe(handlers);
    try {
      const key = newKey();
      await post('/orders', key, { item: 'tea' });
      await post('/orders', key, { item: 'tea' });
    } finally {
      channel.unsubscribe(handlers);
    }
    expect(flights.map((f) => [f.role, f.locked, f.outcome])).toEqual([['leader', true, 'ok']]);
    expect(flights[0]!.keyHash).toMatch(/^[0-9a-f]{32}$/);
  });

  it('on a controller, guards each of its unsafe routes and lets its GETs through', async () => {
    const key = newKey();
    const first = await post('/basket/items', key, { item: 'tea' });
    const retry = await post('/basket/items', key, { item: 'tea' });
    const keyless = await post('/basket/items', undefined, { item: 'tea' });
    const listed = await request(url).get('/basket/items');
    expect([first.status, retry.status, retry.headers['idempotent-replayed']]).toEqual([
      201,
      201,
      'true',
    ]);
    expect([keyless.status, listed.status, listed.body.run]).toEqual([400, 200, 2]);
  });

  it('lets a GET through as it is: a safe method needs no key', async () => {
    const [a, b] = [await request(url).get('/orders'), await request(url).get('/orders')];
    expect([a.status, b.status, a.body.run, b.body.run]).toEqual([200, 200, 1, 2]);
  });
});
