import { Controller, Get, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockMessages,
  BufferLockModule,
  ENGLISH_MESSAGES,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
} from '../../lib/index.js';
import { ThrottledLog } from '../../lib/single-flight/throttled-log.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { MemoryLogger } from '../support/nest-helpers.js';

let server: RedisServer;
let app: INestApplication;
const logger = new MemoryLogger();
let runs = 0;

@Controller('report')
class ReportController {
  @Get()
  @SingleFlight('report')
  async report(): Promise<string> {
    runs++;
    return 'built';
  }
}

beforeAll(async () => {
  server = await startRedis();
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        // Fail fast while the server is down: no offline queue, no retries per command.
        redis: async () => {
          const client = server.client({
            enableOfflineQueue: false,
            maxRetriesPerRequest: 0,
            lazyConnect: true,
          });
          await client.connect(); // without an offline queue, commands need a ready connection
          return client;
        },
        namespace: 'test:fail-open:',
        logger,
      }),
    ],
    controllers: [ReportController],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
});
afterAll(async () => {
  await app.close();
  // The test stops the server itself; stop() twice would wait for an exit that already happened.
  if (server.process.exitCode === null && server.process.signalCode === null) await server.stop();
});

describe('acquire with Redis unreachable: log, then run without a cross-worker lock', () => {
  it('uses the lock while Redis answers', async () => {
    const reply = await request(app.getHttpServer()).get('/report');
    expect(reply.text).toBe('built');
    expect(logger.at('error')).toEqual([]);
  });

  it('runs every call once Redis is gone, and logs the lock error once per interval', async () => {
    await server.stop();
    runs = 0;
    for (let i = 0; i < 20; i++) {
      const reply = await request(app.getHttpServer()).get('/report');
      expect([reply.status, reply.text]).toEqual([200, 'built']);
    }
    expect(runs).toBe(20);
    const errors = logger.at('error');
    // Rate limited (logInterval is 10 s): one fail-open line; then the breaker opened (5 failures).
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(
      /^Redis lock failed: .+; running report without a cross-worker lock$/,
    );
    expect(errors[1]).toBe(
      ENGLISH_MESSAGES.lock_breaker_open.replace('FAILURES', '5').replace('SECONDS', '10'),
    );
    expect(logger.at('warn')).toEqual([
      ENGLISH_MESSAGES.lock_breaker_skip.replace('KEY', 'report'),
    ]);
  });

  it('works the same for a plain engine outside Nest', async () => {
    const own = new MemoryLogger();
    const engine = new SingleFlightEngine({
      lock: app.get(RedisLockService),
      options: { logger: own },
    });
    await expect(engine.run('plain', () => 'ran anyway')).resolves.toBe('ran anyway');
    expect(own.at('error')).toHaveLength(1);
  });
});

describe('rate-limited log lines', () => {
  it('writes one line per id per interval and counts the rest into the next line', () => {
    const log = new MemoryLogger();
    let now = 0;
    const throttled = new ThrottledLog(log, new BufferLockMessages(), 10_000, () => now);
    throttled.error('lock_fail_open', 'first');
    for (let i = 0; i < 5; i++) throttled.error('lock_fail_open', 'again');
    throttled.warn('lock_wait_timeout', 'other id');
    now = 10_000;
    throttled.error('lock_fail_open', 'later');
    now = 25_000;
    throttled.error('lock_fail_open', 'quiet again');
    expect(log.lines).toEqual([
      { level: 'error', text: 'first' },
      { level: 'warn', text: 'other id' },
      {
        level: 'error',
        text: ENGLISH_MESSAGES.log_suppressed
          .replace('LINE', 'later')
          .replace('COUNT', '5')
          .replace('SECONDS', '10'),
      },
      { level: 'error', text: 'quiet again' },
    ]);
  });
});
