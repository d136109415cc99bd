import { Injectable, type INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockModule,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
} from '../../lib/index.js';
import { FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { lockCommands as lockCommandsOf } from '../support/command-stats.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { MemoryLogger, until } from '../support/nest-helpers.js';

/**
 * Bounded latency with the test's own Redis paused (SIGSTOP): the module builds the client from a
 * URL, so with FAIL_FAST_CLIENT_DEFAULTS (commandTimeout 1 s). Counts, not speed: how many calls
 * hit the timeout before the breaker opened, and how many commands reached Redis while it was open
 * (commands sent to a stopped server wait in its socket and are counted after SIGCONT).
 */

let server: RedisServer;
let admin: Redis;
let app: INestApplication;

@Injectable()
class Reports {
  @SingleFlight((id: string) => `report:${id}`)
  async build(_id: string): Promise<boolean> {
    return currentFlight()!.locked;
  }
}

const lockCommands = (): Promise<number> => lockCommandsOf(admin);

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        redis: server.url,
        namespace: 'test:fail-fast:',
        logger: new MemoryLogger(),
        circuitBreaker: { failureThreshold: 3, openSeconds: 2, probes: 1 },
      }),
    ],
    providers: [Reports],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
});
afterAll(async () => {
  server.resume();
  await app.close();
  await server.stop();
});

describe('Redis paused (SIGSTOP): bounded latency, the breaker, recovery after SIGCONT', () => {
  it('times out 3 calls, then skips Redis without a command, then locks again with no restart', async () => {
    const reports = app.get(Reports);
    const states: string[] = [];
    app.get(SingleFlightEngine).on('breaker', (state) => states.push(state));
    expect(await reports.build('warm')).toBe(true);
    const before = await lockCommands();

    server.pause();
    const timedOut: number[] = [];
    for (let i = 0; i < 3; i++) {
      const start = Date.now();
      expect(await reports.build(`slow-${i}`)).toBe(false); // fail-open
      timedOut.push(Date.now() - start);
    }
    expect(states).toEqual(['open']);
    // Each waited about commandTimeout, not ioredis's default (none) or the OS's TCP timeout.
    const limit = FAIL_FAST_CLIENT_DEFAULTS.commandTimeout + 2000;
    expect(timedOut.every((ms) => ms < limit)).toBe(true);
    for (let i = 0; i < 20; i++) expect(await reports.build(`open-${i}`)).toBe(false);

    server.resume();
    // Only the 3 timed-out acquires, each followed by a release of its own token, ever reached
    // Redis; the 20 calls while open sent nothing.
    await until(async () => (await lockCommands()) - before >= 6);
    await new Promise((r) => setTimeout(r, 300));
    expect((await lockCommands()) - before).toBe(6);
    // The acquires ran late (after SIGCONT) and took their locks; the releases let go of them.
    const lock = app.get(RedisLockService);
    for (let i = 0; i < 3; i++)
      expect(await admin.exists(lock.redisKey(`report:slow-${i}`))).toBe(0);

    await until(() => Promise.resolve(reports.build('probe')), 15_000);
    expect(states).toEqual(['open', 'half-open', 'closed']);
    expect(await reports.build('after')).toBe(true);
  }, 60_000);
});
