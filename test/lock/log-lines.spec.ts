import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferLockMessages, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

const FORGED = 'report\n[Nest] 1  - 12/01/2026, 9:00:00 PM     LOG [Auth] admin logged in';

let stopped: RedisServer;
beforeAll(async () => {
  stopped = await startRedis();
  await stopped.stop();
});
afterAll(() => stopped.stop());

describe('a key in a message', () => {
  it('is cut to 200 characters, with its length, and its control characters escaped', () => {
    const messages = new BufferLockMessages();
    const huge = messages.render('lock_lost', { KEY: 'k'.repeat(10_000_000), REASON: 'lost' });
    expect(huge).toBe(
      `The lock on ${'k'.repeat(200)}… (10000000 characters) was lost (lost); the work is no longer exclusive`,
    );
    const forged = messages.render('lock_lost', { KEY: FORGED, REASON: 'lost' });
    expect(forged).not.toMatch(/[\n\r]/);
    expect(forged).toContain('report\\n[Nest] 1');
    expect(
      messages.render('lock_lost', { KEY: 'a\u0007b\u001bc\u2028', REASON: 'lost' }),
    ).toContain('a\\u0007b\\u001bc\\u2028');
  });

  it('cannot forge a log line: a fail-open run on a 10 MB key logs one short line', async () => {
    const logger = new MemoryLogger();
    const lock = new RedisLockService({
      redis: () => stopped.client({ maxRetriesPerRequest: 0, retryStrategy: () => null }),
      namespace: 'log:lines:',
    });
    const engine = new SingleFlightEngine({ lock, options: { logger } });
    for (const key of [FORGED, `${FORGED}${'x'.repeat(10 * 1024 * 1024)}`]) {
      expect(await engine.run(key, () => 'built')).toBe('built');
    }
    const lines = logger.lines.map((line) => line.text);
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) {
      expect(line).not.toMatch(/[\n\r]/);
      expect(line.length).toBeLessThan(1_000);
    }
    await engine.close();
  });
});
