import { Controller, Get, Param, type INestApplication } from '@nestjs/common';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockModule,
  ENGLISH_MESSAGES,
  RedisLockService,
  SingleFlight,
} from '../../lib/index.js';
import { BufferLockHealthIndicator } from '../../lib/terminus/index.js';
import { releaseChannel } from '../../lib/redis/keys.js';
import { shardSubscribers } from '../single-flight/support.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `BufferLockHealthIndicator` in a Nest app with `TerminusModule` and a `/health` route, over HTTP,
 * through one Redis outage: up, paused (SIGSTOP), killed, and back. The module makes its client
 * from a URL, so with the fail-fast defaults.
 */

const TIMEOUT_MS = 500;
const NS = 'test:health-http:';

@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly bufferLock: BufferLockHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([
      () => this.bufferLock.isHealthy('buffer-lock', { timeout: TIMEOUT_MS }),
    ]);
  }
}

@Controller('report')
class ReportController {
  @Get(':name')
  @SingleFlight((name: string) => `report:${name}`)
  async report(@Param('name') _name: string): Promise<string> {
    return 'built';
  }
}

let server: RedisServer;
let admin: Redis;
let app: INestApplication;
/** Another worker's lock on the same Redis, to make this app's callers wait. */
let other: RedisLockService;

interface Reply {
  status: number;
  body: {
    status: string;
    info: Record<string, unknown>;
    error: Record<string, unknown>;
    details: Record<string, unknown>;
  };
  ms: number;
}

async function getHealth(): Promise<Reply> {
  const started = performance.now();
  const reply = await request(app.getHttpServer()).get('/health');
  return {
    status: reply.status,
    body: reply.body as Reply['body'],
    ms: performance.now() - started,
  };
}

/**
 * A GET /report/`name` that waits for `other`'s lock, subscribed for its release; and that
 * release. Each wait has a name of its own: a subscription left on another channel (an SSUBSCRIBE
 * that ioredis sent late, from its offline queue, once the server was back) never passes for it.
 */
async function waitingReport(name: string): Promise<{
  reply: Promise<string>;
  release: () => Promise<unknown>;
}> {
  const [guard] = await other.acquire(`report:${name}`);
  expect(guard).toBeDefined();
  const reply = request(app.getHttpServer())
    .get(`/report/${name}`)
    .then((r) => `${r.status} ${r.text}`);
  const channel = releaseChannel(guard!.key);
  await until(async () => (await shardSubscribers(admin, channel)) === 1);
  return { reply, release: () => other.release(guard!) };
}

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  other = new RedisLockService({ redis: () => server.client(), namespace: NS });
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({ redis: server.url, namespace: NS, logger: new MemoryLogger() }),
      TerminusModule.forRoot({ logger: false }),
    ],
    controllers: [HealthController, ReportController],
    providers: [BufferLockHealthIndicator],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
});
afterAll(async () => {
  await app?.close();
  await server?.stop();
});

describe('GET /health through a Redis outage', () => {
  it('Redis up: 200, status ok, the breaker closed, the PING time and the subscriber', async () => {
    // A wait makes the subscriber connect and confirm a subscription.
    const waiting = await waitingReport('up');
    await waiting.release();
    expect(await waiting.reply).toBe('200 built');
    const reply = await getHealth();
    expect(reply.status).toBe(200);
    expect(reply.body.status).toBe('ok');
    expect(reply.body.error).toEqual({});
    const details = reply.body.details['buffer-lock'] as Record<string, unknown>;
    expect(details).toEqual({
      status: 'up',
      breaker: 'closed',
      pingMs: expect.any(Number),
      subscriber: 'usable',
    });
    expect(details.pingMs as number).toBeGreaterThanOrEqual(0);
    expect(details.pingMs as number).toBeLessThan(TIMEOUT_MS);
    expect(reply.body.info).toEqual({ 'buffer-lock': details });
  });

  it('Redis paused (SIGSTOP): 503 once the timeout is over, for every concurrent check', async () => {
    server.pause();
    try {
      const replies = await Promise.all(Array.from({ length: 5 }, () => getHealth()));
      for (const reply of replies) {
        expect(reply.status).toBe(503);
        expect(reply.body.status).toBe('error');
        expect(reply.body.error).toEqual({
          'buffer-lock': {
            status: 'down',
            breaker: 'closed',
            pingMs: null,
            subscriber: 'usable',
            message: ENGLISH_MESSAGES.health_ping_timeout.replace('MS', String(TIMEOUT_MS)),
          },
        });
        // The documented bound: the timeout, plus the event loop's delay (a loaded machine).
        expect(reply.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
        expect(reply.ms).toBeLessThan(TIMEOUT_MS + 1000);
      }
    } finally {
      server.resume();
    }
    await until(async () => (await getHealth()).status === 200);
  });

  it('Redis killed: 503 at once with the client’s error; the breaker opens as calls fail', async () => {
    const waiting = await waitingReport('killed');
    await server.kill();
    // The waiter was woken by the lost subscription and ran without the lock.
    expect(await waiting.reply).toBe('200 built');
    const first = await getHealth();
    expect(first.status).toBe(503);
    const down = first.body.error['buffer-lock'] as Record<string, unknown>;
    expect(down).toMatchObject({ status: 'down', pingMs: null, subscriber: 'unusable' });
    expect(down.message).toMatch(/^Redis PING failed: .+/);
    // An error answers faster than a timeout.
    expect(first.ms).toBeLessThan(TIMEOUT_MS);
    // Five failed calls in a row (the waiter's was one) open the breaker.
    for (let i = 0; i < 4; i++) {
      expect((await request(app.getHttpServer()).get('/report/other')).text).toBe('built');
    }
    const open = await getHealth();
    expect(open.status).toBe(503);
    const detail = open.body.error['buffer-lock'] as Record<string, unknown>;
    expect(detail).toMatchObject({ status: 'down', breaker: 'open', pingMs: null });
    expect(detail.message).toMatch(
      new RegExp(`^Redis PING failed: .+; ${ENGLISH_MESSAGES.health_breaker_open}$`),
    );
  });

  it('Redis back: 200 again; the breaker closes on the next call, the subscriber on the next wait', async () => {
    await server.restart();
    await until(async () => (await getHealth()).status === 200);
    const back = await getHealth();
    expect(back.body.status).toBe('ok');
    // The client is ready again: the breaker lets its probe through, and no call has run yet.
    expect(back.body.details['buffer-lock']).toMatchObject({
      status: 'up',
      breaker: 'half-open',
      subscriber: 'unusable',
    });
    expect((await request(app.getHttpServer()).get('/report/other')).text).toBe('built');
    const waiting = await waitingReport('back');
    await waiting.release();
    expect(await waiting.reply).toBe('200 built');
    const healed = await getHealth();
    expect(healed.status).toBe(200);
    expect(healed.body.details['buffer-lock']).toEqual({
      status: 'up',
      breaker: 'closed',
      pingMs: expect.any(Number),
      subscriber: 'usable',
    });
  });
});
