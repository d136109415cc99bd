import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import { inHeapChild } from '../support/heap-child.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { fuzzParameters } from './fuzz.js';

/**
 * Bounds on what a key leaves behind: runs with huge and tiny ttls per call leave no timer, and
 * many distinct keys leave no fence counter once the counter's bound (ttl + 1 s) has passed.
 */

const FILE = 'test/fuzz/bounds.spec.ts';
let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

describe('bounds', () => {
  it('engine.run with huge and tiny ttls per call leaves no timer (Node’s timer lists, counted)', async () => {
    const { runs, lists } = await inHeapChild<{ runs: number; lists: number[] }>(
      `
import fc from 'fast-check';
import { createRequire } from 'node:module';
import { RedisLockService, SingleFlightEngine } from './dist/index.js';
const { timerListMap } = createRequire(import.meta.url)('internal/timers');
const count = () => Object.keys(timerListMap).length;
const lock = new RedisLockService({ redis: 'memory://', messages: { memory_backend: '-' } });
const engine = new SingleFlightEngine({ lock });
// Tiny: a watchdog every ms; huge: up to a timer's longest wait (2^31 - 1 ms).
const ttl = fc.oneof(fc.double({ min: 0.003, max: 1, noNaN: true }), fc.integer({ min: 1e5, max: 2_147_483 }));
const baseline = count();
const lists = [];
let runs = 0;
await fc.assert(
  fc.asyncProperty(fc.array(ttl, { minLength: 1, maxLength: 200, size: 'max' }), async (ttls) => {
    await Promise.all(
      ttls.map((t, i) => engine.run('k' + i, () => i, { ttl: t, onBusy: 'skip' })),
    );
    runs += ttls.length;
    lists.push(count() - baseline);
    return count() === baseline;
  }),
  { numRuns: Number(process.env.FUZZ_RUNS || 50), seed: process.env.FUZZ_SEED ? Number(process.env.FUZZ_SEED) : undefined },
);
engine.close();
console.log(JSON.stringify({ runs, lists }));
`,
      {},
      ['--expose-internals'],
    );
    console.log(
      `${runs} runs; timer lists left after each property run: max ${Math.max(...lists)}`,
    );
    expect(runs).toBeGreaterThan(100);
    expect(lists.every((n) => n === 0)).toBe(true);
  }, 120_000);

  it('many distinct keys leave no fence counter after the bound', async () => {
    const client = server.client();
    let namespaces = 0;
    const left: number[] = [];
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.string({ minLength: 1, maxLength: 40 }), {
          minLength: 50,
          maxLength: 400,
        }),
        fc.double({ min: 0.001, max: 0.2, noNaN: true }),
        async (keys, ttl) => {
          const namespace = `fz:bounds:${++namespaces}:`;
          const lock = new RedisLockService({ redis: client, namespace, fencing: true });
          for (const key of keys) {
            const [guard] = await lock.acquire(key, ttl);
            if (guard) await lock.release(guard);
          }
          const fences = async (): Promise<number> =>
            (await client.keys(`{${namespace}*:fence`)).length;
          const made = await fences();
          // The bound: the lock's ttl + 1 s after the last acquire, and a little for the clock.
          await new Promise((r) => setTimeout(r, ttl * 1000 + 1100));
          const after = await fences();
          left.push(after);
          console.log(
            `${keys.length} keys (ttl ${ttl.toFixed(3)} s): ${made} fence keys, ${after} after the bound`,
          );
          return made === keys.length && after === 0;
        },
      ),
      fuzzParameters(FILE, 4),
    );
    expect(left.length).toBeGreaterThan(0);
  }, 120_000);
});
