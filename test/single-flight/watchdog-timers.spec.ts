import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inHeapChild } from '../support/heap-child.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * A finished run leaves no watchdog timer behind, whatever its ttl. Node keeps the list of an
 * unref'd timer's duration after a clearTimeout until that duration has passed; one ttl per call
 * would keep one list per call. Measured as the heap after GC in a process of its own.
 */

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const RUNS = 25_000;

describe('engine.run with a different ttl per call', () => {
  it(`${RUNS} runs, each with its own ttl, leave the heap where it was`, async () => {
    const { before, after } = await inHeapChild<{ before: number; after: number }>(
      `
import { Redis } from 'ioredis';
import { RedisLockService, SingleFlightEngine } from './dist/index.js';
const lock = new RedisLockService({ redis: new Redis(Number(process.env.PORT)), namespace: 'wd:' });
const engine = new SingleFlightEngine({ lock });
let next = 0;
const runs = (count) =>
  Promise.all(Array.from({ length: 16 }, async (_, lane) => {
    while (next < count) {
      const i = next++;
      await engine.run('k' + lane, () => i, { ttl: 100 + i * 0.003 });
    }
  }));
await runs(5000);
const before = heap();
await runs(5000 + ${RUNS});
const after = heap();
engine.close();
lock.redis.disconnect();
console.log(JSON.stringify({ before, after }));
`,
      { PORT: String(server.port) },
    );
    const growth = after - before;
    console.log(`heap after GC: ${(growth / 1e6).toFixed(2)} MB more after ${RUNS} runs`);
    expect(growth).toBeLessThan(1e6);
  }, 120_000);
});
