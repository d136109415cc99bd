import { Body, Controller, Post, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import request from 'supertest';
import { lastValueFrom, of } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  Idempotent,
  LockError,
  type IdempotentOptions,
} from '../../lib/index.js';
import { BufferCache } from '../../lib/cache/buffer-cache.service.js';
import { IdempotencyInterceptor } from '../../lib/cache/idempotency.interceptor.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { SingleFlightEngine } from '../../lib/single-flight/single-flight.engine.js';
import { closeApps, PLATFORMS, startApp } from '../support/http-apps.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `@Idempotent`'s options are checked when the class is defined, each in the catalog's words;
 * outside HTTP and messages it refuses to run rather than run unguarded; a Redis that cannot be asked answers
 * 503 and runs nothing, never a second run.
 */

/** `[property, code]` of each violation `@Idempotent(options)` throws with. */
const refused = (options: unknown): [string, string][] => {
  try {
    Idempotent(options as IdempotentOptions);
  } catch (error) {
    expect(error).toBeInstanceOf(BufferLockConfigError);
    return (error as BufferLockConfigError).violations.map((v) => [v.property, v.code]);
  }
  throw new Error('accepted');
};

describe('@Idempotent options', () => {
  it.each([
    ['options that are no object', 'tea', [['options', 'idempotent_options_invalid']]],
    [
      'a header that is no header name',
      { header: 'Idempotency Key' },
      [['header', 'idempotent_header_invalid']],
    ],
    [
      'required that is no boolean',
      { required: 'yes' },
      [['required', 'idempotent_required_invalid']],
    ],
    [
      'expiresAfter of 0',
      { expiresAfter: 0 },
      [['expiresAfter', 'idempotent_expires_after_invalid']],
    ],
    ["onBusy: 'skip'", { onBusy: 'skip' }, [['onBusy', 'idempotent_on_busy_invalid']]],
    ['a scope that is no function', { scope: 'user' }, [['scope', 'idempotent_scope_invalid']]],
    ['a key that is no function', { key: 'id' }, [['key', 'idempotent_key_invalid']]],
    [
      'storeErrors that is no boolean',
      { storeErrors: 1 },
      [['storeErrors', 'idempotent_store_errors_invalid']],
    ],
    ['a lock ttl of -1', { ttl: -1 }, [['ttl', 'redis_ttl_invalid']]],
    [
      'a lockTimeout not below ttl',
      { ttl: 5, lockTimeout: 5 },
      [['lockTimeout', 'lock_timeout_not_below_ttl']],
    ],
    ['a name it does not know', { expiry: 60 }, [['expiry', 'option_unknown']]],
  ])('refuses %s', (_, options, violations) => {
    expect(refused(options)).toEqual(violations);
  });

  it('lists every violation at once', () => {
    expect(
      refused({ header: '', onBusy: 'skip', storeErrors: 'no' }).map(([, code]) => code),
    ).toEqual([
      'idempotent_header_invalid',
      'idempotent_on_busy_invalid',
      'idempotent_store_errors_invalid',
    ]);
  });

  it('takes seconds as strings, as configuration gives them', () => {
    expect(() => Idempotent({ expiresAfter: '3600', ttl: '30', lockTimeout: '10' })).not.toThrow();
  });
});

describe('@Idempotent with Redis in trouble, and outside HTTP', () => {
  let server: RedisServer;
  let runs = 0;

  @Controller()
  class PaymentsController {
    @Post('payments')
    @Idempotent()
    pay(@Body() body: { amount: number }): object {
      return { amount: body.amount, run: ++runs };
    }
  }

  beforeAll(async () => {
    server = await startRedis();
  });
  afterAll(async () => {
    await closeApps();
    await server.stop();
  });

  it.each(PLATFORMS)(
    'on $name, answers 503 and runs nothing while Redis is down, and runs once it is back',
    async (platform) => {
      runs = 0;
      const namespace = `test:idempotent-down:${platform.name}:`;
      const { url } = await startApp(platform, server, [PaymentsController], {
        namespace,
        redis: server.url,
        logger: { log() {}, warn() {}, error() {} },
      });
      const pay = () =>
        request(url).post('/payments').set('Idempotency-Key', 'p1').send({ amount: 5 });
      expect((await pay()).status).toBe(201);
      await server.kill();
      const down = await pay();
      expect(down.status).toBe(503);
      expect(down.body.code).toBe('idempotency_unavailable');
      expect(runs).toBe(1);
      await server.restart();
      // A restart without persistence lost the record: the retry runs again (as documented).
      let back = await pay();
      for (let tries = 0; back.status === 503 && tries < 50; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        back = await pay();
      }
      expect(back.status).toBe(201);
      expect(runs).toBe(2);
      expect((await pay()).headers['idempotent-replayed']).toBe('true');
      await closeApps();
    },
  );

  it('refuses to run a handler outside HTTP and messages (a WebSocket gateway), saying where', async () => {
    const lock = new RedisLockService({
      redis: () => server.client(),
      namespace: 'test:idem-rpc:',
    });
    const engine = new SingleFlightEngine({ lock });
    const cache = new BufferCache({ lock, engine });
    const interceptor = new IdempotencyInterceptor(cache, engine, new Reflector());
    const handler = Object.defineProperty(function pay() {}, 'name', { value: 'pay' });
    Reflect.defineMetadata('nestjs-buffer-lock:idempotent', { options: {}, lock: {} }, handler);
    const context = {
      getType: () => 'ws',
      getHandler: () => handler,
      getClass: () => PaymentsController,
    } as unknown as ExecutionContext;
    let ran = false;
    const next = { handle: () => ((ran = true), of('paid')) };
    const refusal = await interceptor.intercept(context, next).then(
      (stream) => lastValueFrom(stream),
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(LockError);
    expect((refusal as LockError).message).toBe(
      '@Idempotent on PaymentsController.pay works on HTTP routes and message handlers, not in a ws context',
    );
    expect(ran).toBe(false);
    await engine.close();
  });
});
