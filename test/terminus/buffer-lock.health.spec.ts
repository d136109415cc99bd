import { HealthIndicatorService } from '@nestjs/terminus';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockMessages,
  ENGLISH_MESSAGES,
  LockError,
  RedisLockService,
  SingleFlightEngine,
  type RedisScriptClient,
} from '../../lib/index.js';
import { BufferLockHealthIndicator } from '../../lib/terminus/index.js';
import { commandStats } from '../support/command-stats.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `BufferLockHealthIndicator.isHealthy` on its own (made with `new`), against real Redis servers,
 * and with clients that misbehave. The HTTP story is in health.http.spec.ts.
 */

let server: RedisServer;
let admin: Redis;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(async () => {
  await server?.stop();
});

/** An indicator over `lock` and an engine of its own (or `engine`). */
function indicator(
  lock: RedisLockService,
  engine: SingleFlightEngine = new SingleFlightEngine({
    lock,
    options: { logger: new MemoryLogger() },
  }),
  messages?: BufferLockMessages,
): BufferLockHealthIndicator {
  return new BufferLockHealthIndicator(lock, engine, new HealthIndicatorService(), messages);
}

/** EVAL commands the server ran so far. */
const scripts = async (): Promise<number> => (await commandStats(admin)).get('eval') ?? 0;

const lockOn = (client: unknown): RedisLockService =>
  new RedisLockService({ redis: () => client as RedisScriptClient, namespace: 'test:health:' });

/** A client whose PING is `ping`; its eval() answers 0 (a busy lock). */
const pingOnly = (ping: () => unknown): object => ({ eval: () => Promise.resolve(0), ping });

describe('isHealthy: what it reports', () => {
  it('up under the given key, with the breaker, the PING time and the subscriber', async () => {
    const result = await indicator(lockOn(server.client())).isHealthy('redis');
    expect(result).toEqual({
      redis: { status: 'up', breaker: 'closed', pingMs: expect.any(Number), subscriber: 'usable' },
    });
  });

  it("keys its result 'buffer-lock' by default", async () => {
    const result = await indicator(lockOn(server.client())).isHealthy();
    expect(Object.keys(result)).toEqual(['buffer-lock']);
    expect(result['buffer-lock'].status).toBe('up');
  });

  it("a client with eval() only is pinged by a Lua script on the lock's client", async () => {
    const redis = server.client();
    const evalOnly = { eval: (...args: Parameters<Redis['eval']>) => redis.eval(...args) };
    const before = await scripts();
    const result = await indicator(lockOn(evalOnly)).isHealthy();
    expect(result['buffer-lock']).toMatchObject({ status: 'up', pingMs: expect.any(Number) });
    expect((await scripts()) - before).toBe(1);
  });

  it("reports the breaker 'disabled' when the engine has none", async () => {
    const lock = lockOn(server.client());
    const engine = new SingleFlightEngine({
      lock,
      options: { circuitBreaker: false, logger: new MemoryLogger() },
    });
    const result = await indicator(lock, engine).isHealthy();
    expect(result['buffer-lock']).toMatchObject({
      status: 'up',
      breaker: 'disabled',
      subscriber: 'usable',
    });
  });

  it('is down while the breaker is open, even with Redis answering', async () => {
    // The engine's lock is on a server that is gone; the indicator pings one that answers.
    const gone = await startRedis();
    const client = gone.client({ enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    const lock = new RedisLockService({ redis: () => client, namespace: 'test:health:' });
    const engine = new SingleFlightEngine({
      lock,
      options: {
        circuitBreaker: { failureThreshold: 2, openSeconds: 60, probes: 1 },
        logger: new MemoryLogger(),
      },
    });
    await gone.stop();
    try {
      for (let i = 0; i < 2; i++) await engine.run('k', () => 'ran');
      expect(engine.breaker?.state).toBe('open');
      const result = await indicator(lockOn(server.client()), engine).isHealthy();
      expect(result['buffer-lock']).toEqual({
        status: 'down',
        breaker: 'open',
        pingMs: expect.any(Number),
        subscriber: 'usable',
        message: ENGLISH_MESSAGES.health_breaker_open,
      });
    } finally {
      engine.close();
    }
  });

  it('speaks the messages it is given', async () => {
    const messages = new BufferLockMessages({
      messages: { health_ping_timeout: 'Kein PONG nach MS ms' },
    });
    const lock = lockOn(pingOnly(() => new Promise(() => {})));
    const result = await indicator(lock, undefined, messages).isHealthy('r', { timeout: 50 });
    expect(result.r).toMatchObject({ status: 'down', message: 'Kein PONG nach 50 ms' });
  });
});

describe('isHealthy: bounded, whatever Redis or the client does', () => {
  it('a paused server and a client that would wait forever: down after the default 1000 ms', async () => {
    const paused = await startRedis();
    // No command timeout, an offline queue: this client's PING waits as long as the server does.
    const lock = lockOn(paused.client());
    const check = indicator(lock);
    expect((await check.isHealthy())['buffer-lock'].status).toBe('up');
    paused.pause();
    try {
      const started = performance.now();
      const result = await check.isHealthy();
      const ms = performance.now() - started;
      expect(result['buffer-lock']).toMatchObject({
        status: 'down',
        pingMs: null,
        message: ENGLISH_MESSAGES.health_ping_timeout.replace('MS', '1000'),
      });
      expect(ms).toBeGreaterThanOrEqual(995);
      expect(ms).toBeLessThan(2000);
    } finally {
      paused.resume();
      await paused.stop();
    }
  });

  it('a factory that gives no client in time: down after the timeout', async () => {
    const lock = new RedisLockService({
      redis: () => new Promise<undefined>(() => {}),
      connectTimeout: 60,
    });
    const result = await indicator(lock).isHealthy('r', { timeout: 100 });
    expect(result.r).toMatchObject({
      status: 'down',
      pingMs: null,
      subscriber: 'unusable',
      message: ENGLISH_MESSAGES.health_ping_timeout.replace('MS', '100'),
    });
  });

  it('a factory that gives no client: down with the lock’s words', async () => {
    const lock = new RedisLockService({ redis: () => undefined });
    const result = await indicator(lock).isHealthy('r');
    expect(result.r).toMatchObject({
      status: 'down',
      pingMs: null,
      subscriber: 'unusable',
      message: ENGLISH_MESSAGES.health_ping_failed.replace(
        'ERROR',
        ENGLISH_MESSAGES.redis_no_client,
      ),
    });
  });

  const misbehaving: [string, object, string][] = [
    [
      'a ping() that throws',
      pingOnly(() => {
        throw new Error('boom');
      }),
      ENGLISH_MESSAGES.health_ping_failed.replace('ERROR', 'boom'),
    ],
    [
      'a ping() that rejects with no Error',
      pingOnly(() => Promise.reject(42)),
      ENGLISH_MESSAGES.health_ping_failed.replace('ERROR', '42'),
    ],
    [
      'a ping() getter that throws',
      Object.defineProperty({ eval: () => Promise.resolve(0) }, 'ping', {
        get() {
          throw new Error('trap');
        },
      }),
      ENGLISH_MESSAGES.health_ping_failed.replace('ERROR', 'trap'),
    ],
    [
      'a ping() that answers something else',
      pingOnly(() => Promise.resolve('nope')),
      ENGLISH_MESSAGES.health_ping_bad_reply,
    ],
    [
      'an eval() that throws',
      {
        eval: () => {
          throw new Error('no eval');
        },
      },
      ENGLISH_MESSAGES.health_ping_failed.replace('ERROR', 'no eval'),
    ],
  ];
  for (const [name, client, message] of misbehaving) {
    it(`${name}: down, in the catalog's words`, async () => {
      const result = await indicator(lockOn(client)).isHealthy('r', { timeout: 200 });
      expect(result.r).toMatchObject({ status: 'down', pingMs: null, message });
    });
  }

  it('a ping() that answers PONG without a promise: up', async () => {
    const result = await indicator(lockOn(pingOnly(() => 'PONG'))).isHealthy('r');
    expect(result.r.status).toBe('up');
  });

  it('a PING that fails after the timeout leaves nothing unhandled', async () => {
    let reject!: (error: Error) => void;
    const late = pingOnly(() => new Promise((_, r) => (reject = r)));
    const result = await indicator(lockOn(late)).isHealthy('r', { timeout: 20 });
    expect(result.r.status).toBe('down');
    reject(new Error('too late'));
    // An unhandled rejection would fail the run (vitest reports it).
    await new Promise((r) => setTimeout(r, 20));
  });
});

describe('isHealthy: its options', () => {
  const invalid: [string, unknown][] = [
    ['zero', 0],
    ['negative', -1],
    ['NaN', Number.NaN],
    ['Infinity', Number.POSITIVE_INFINITY],
    ['longer than a timer can wait', 2 ** 31],
    ['a string', '100'],
  ];
  for (const [name, timeout] of invalid) {
    it(`refuses a timeout that is ${name} with a LockError, sending nothing`, async () => {
      let pinged = 0;
      const lock = lockOn(pingOnly(() => (pinged++, 'PONG')));
      const error: unknown = await indicator(lock)
        .isHealthy('r', { timeout: timeout as number })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockError);
      expect(error).toMatchObject({
        code: 'health_timeout_invalid',
        message: ENGLISH_MESSAGES.health_timeout_invalid,
      });
      expect(pinged).toBe(0);
    });
  }
});
