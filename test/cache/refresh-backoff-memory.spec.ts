import { describe, expect, it } from 'vitest';
import { inHeapChild } from '../support/heap-child.js';

/**
 * The back-off of a failed refresh is remembered per key only while it counts: for the back-off
 * and as long again (so that the next failure doubles it). Keys that fail once and are never
 * read again leave nothing behind. Measured as the heap after GC in a process of its own, on
 * memory://, with the cache's clock moved on past every back-off.
 */

const KEYS = 20_000;
const mb = (n: number): string => `${n < 0 ? '' : '+'}${(n / 1e6).toFixed(2)}`;

describe('refresh back-off of keys never read again', () => {
  it(`${KEYS} failed refreshes leave the heap where it was once their back-off has passed`, async () => {
    const { before, failed, after, failures } = await inHeapChild<{
      before: number;
      failed: number;
      after: number;
      failures: number;
    }>(`
import { BufferCache, RedisLockService } from './dist/index.js';
const silent = { log() {}, warn() {}, error() {} };
let clock = Date.now();
const lock = new RedisLockService({ redis: 'memory://', ttl: 1, messages: { memory_backend: '-' } });
const cache = new BufferCache({ lock, now: () => clock, options: { logger: silent } });
const options = { ttl: 1, grace: 3600, lockTtl: 1, lockTimeout: 0.5 };
const failing = () => Promise.reject(new Error('upstream 500'));
let failures = 0;
cache.on('refresh-failed', () => failures++);
// One round: stale entries of its own, each refresh failing once, the clock moved past every
// back-off (1 s) and as long again, and time for the sweep and for the held locks to expire.
async function round(name) {
  const keys = Array.from({ length: ${KEYS} }, (_, i) => name + ':' + i);
  for (const key of keys) await cache.set(key, 'good', options);
  clock += 2000;
  const ready = heap();
  const target = failures + keys.length;
  for (const key of keys) await cache.getOrSet(key, failing, options);
  while (failures < target) await new Promise((r) => setTimeout(r, 20));
  const failed = heap() - ready;
  clock += 60_000;
  await new Promise((r) => setTimeout(r, 6_000));
  await cache.get(keys[0]);
  for (const key of keys) await cache.delete(key);
  return failed;
}
// The first round grows the tables of this process to their size: the second is measured.
await round('warm');
const before = heap();
const failed = before + (await round('report'));
const after = heap();
console.log(JSON.stringify({ before, failed, after, failures: failures / 2 }));
`);
    console.log(
      `heap after GC: ${mb(failed - before)} MB with ${KEYS} back-offs, ` +
        `${mb(after - before)} MB once they passed`,
    );
    expect(failures).toBe(KEYS);
    // Not vacuous: the back-offs took room while they counted.
    expect(failed - before).toBeGreaterThan(2e6);
    expect(after - before).toBeLessThan(1e6);
  }, 120_000);
});
