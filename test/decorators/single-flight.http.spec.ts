import { Controller, Get, type INestApplication } from '@nestjs/common';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test, type TestingModule } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockModule,
  ENGLISH_MESSAGES,
  RedisLockService,
  SingleFlight,
} from '../../lib/index.js';
import { deferred, MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `@SingleFlight` on HTTP handlers, the same on each of Nest's HTTP platforms (Express and
 * Fastify): concurrent requests for one key build once, a busy key answers as `onBusy` says, and a
 * Redis that is gone leaves every request served without the lock.
 */

@Controller('flight')
class FlightController {
  builds = 0;
  keyCalls = 0;
  gate = deferred();

  @Get('report')
  @SingleFlight(function (this: FlightController) {
    this.keyCalls++; // once per request, leader or follower
    return 'report';
  })
  async report(): Promise<{ build: number }> {
    const build = ++this.builds;
    await this.gate.promise;
    return { build };
  }

  @Get('skip')
  @SingleFlight('busy', { onBusy: 'skip' })
  async skip(): Promise<string | undefined> {
    this.builds++;
    return 'built';
  }

  @Get('throw')
  @SingleFlight('busy', { onBusy: 'throw' })
  async throwing(): Promise<string> {
    this.builds++;
    return 'built';
  }
}

interface Platform {
  readonly name: string;
  /** The app on this platform, initialised and ready for requests. */
  create(ref: TestingModule): Promise<INestApplication>;
}

const PLATFORMS: readonly Platform[] = [
  {
    name: 'Express',
    async create(ref) {
      const app = ref.createNestApplication({ logger: false });
      await app.init();
      return app;
    },
  },
  {
    name: 'Fastify',
    async create(ref) {
      const app = ref.createNestApplication<NestFastifyApplication>(new FastifyAdapter(), {
        logger: false,
      });
      await app.init();
      await app.getHttpAdapter().getInstance().ready();
      return app;
    },
  },
];

describe.each(PLATFORMS)('@SingleFlight over HTTP on $name', (platform) => {
  let server: RedisServer;
  let app: INestApplication;
  let flights: FlightController;
  /** Another worker's lock on the same Redis. */
  let other: RedisLockService;
  const NS = `test:http:${platform.name}:`;

  beforeAll(async () => {
    server = await startRedis();
    other = new RedisLockService({ redis: () => server.client(), namespace: NS });
    const ref = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRoot({ redis: server.url, namespace: NS, logger: new MemoryLogger() }),
      ],
      controllers: [FlightController],
    }).compile();
    app = await platform.create(ref);
    flights = app.get(FlightController);
  });
  afterAll(async () => {
    await app?.close();
    // The last test kills the server itself.
    if (server?.process.exitCode === null && server.process.signalCode === null)
      await server.stop();
  });

  it('20 concurrent requests for one key: one build, the same body for all', async () => {
    flights.builds = 0;
    flights.keyCalls = 0;
    flights.gate = deferred();
    const http = app.getHttpServer();
    const replies = Array.from({ length: 20 }, () =>
      request(http)
        .get('/flight/report')
        .then((reply) => reply),
    );
    await until(() => flights.keyCalls === 20);
    // The one build holds the lock across workers meanwhile.
    expect(await other.acquire('report')).toEqual([undefined, undefined]);
    flights.gate.resolve();
    for (const reply of await Promise.all(replies)) {
      expect(reply.status).toBe(200);
      expect(reply.body).toEqual({ build: 1 });
    }
    expect(flights.builds).toBe(1);
  });

  it("onBusy: 'skip' answers 200 with an empty body without running the handler", async () => {
    const [guard] = await other.acquire('busy');
    flights.builds = 0;
    const reply = await request(app.getHttpServer()).get('/flight/skip');
    expect([reply.status, reply.text]).toEqual([200, '']);
    expect(flights.builds).toBe(0);
    await other.release(guard!);
    const free = await request(app.getHttpServer()).get('/flight/skip');
    expect([free.status, free.text]).toEqual([200, 'built']);
    expect(flights.builds).toBe(1);
  });

  it("onBusy: 'throw' answers 409 with the catalog text", async () => {
    const [guard] = await other.acquire('busy');
    flights.builds = 0;
    const reply = await request(app.getHttpServer()).get('/flight/throw');
    expect(reply.status).toBe(409);
    expect(reply.body).toEqual({
      statusCode: 409,
      code: 'lock_busy',
      message: ENGLISH_MESSAGES.lock_busy,
    });
    expect(flights.builds).toBe(0);
    await other.release(guard!);
    const free = await request(app.getHttpServer()).get('/flight/throw');
    expect([free.status, free.text]).toEqual([200, 'built']);
  });

  it('Redis gone: every request is served without the lock, concurrent ones still by one build', async () => {
    await server.kill();
    flights.builds = 0;
    for (let i = 0; i < 10; i++) {
      const reply = await request(app.getHttpServer()).get('/flight/skip');
      expect([reply.status, reply.text]).toEqual([200, 'built']);
    }
    expect(flights.builds).toBe(10);
    // In this process, concurrent requests are still one flight.
    flights.builds = 0;
    flights.keyCalls = 0;
    flights.gate = deferred();
    const replies = Array.from({ length: 20 }, () =>
      request(app.getHttpServer())
        .get('/flight/report')
        .then((reply) => reply),
    );
    await until(() => flights.keyCalls === 20);
    flights.gate.resolve();
    for (const reply of await Promise.all(replies)) {
      expect([reply.status, reply.body]).toEqual([200, { build: 1 }]);
    }
    expect(flights.builds).toBe(1);
  });
});
