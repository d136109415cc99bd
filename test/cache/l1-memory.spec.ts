import { describe, expect, it } from 'vitest';
import { inHeapChild } from '../support/heap-child.js';

/**
 * The in-process tier keeps `maxEntries` copies whatever number of keys passes through it. Measured
 * as the heap after GC in a process of its own, in front of a store that keeps nothing (so that
 * only the tier holds values), with invalidations on memory://.
 */

const KEYS = 1_000_000;
const mb = (n: number): string => `${n < 0 ? '' : '+'}${(n / 1e6).toFixed(2)}`;

describe('l1 under a million distinct keys', () => {
  it(`${KEYS} keys written leave maxEntries copies and the heap where 10,000 left it`, async () => {
    const result = await inHeapChild<{
      empty: number;
      full: number;
      after: number;
      first: unknown;
      last: unknown;
      wide: number;
    }>(`
import { BufferCache, RedisLockService } from './dist/index.js';
const silent = { log() {}, warn() {}, error() {} };
const nowhere = { get: () => undefined, set: () => undefined, delete: () => undefined };
const lock = new RedisLockService({ redis: 'memory://l1-heap', messages: { memory_backend: '-' } });
async function cacheOf(maxEntries) {
  const cache = new BufferCache({ lock, store: nowhere, options: { logger: silent, l1: { maxEntries, maxAge: 600 } } });
  // Its first use subscribes it to invalidations; until then it keeps nothing.
  while ((await (cache.set('probe', 1), cache.get('probe'))) !== 1) await new Promise((r) => setTimeout(r, 5));
  return cache;
}
const value = { name: 'a report', rows: [1, 2, 3] };
const cache = await cacheOf(1000);
const empty = heap();
for (let i = 0; i < 10_000; i++) await cache.set('key:' + i, value);
const full = heap();
for (let i = 10_000; i < ${KEYS}; i++) await cache.set('key:' + i, value);
const after = heap();
const first = (await cache.get('key:0')) ?? null;
const last = (await cache.get('key:${KEYS - 1}')) ?? null;
// Not vacuous: a tier that may keep them all grows with them.
const wideCache = await cacheOf(100_000);
const before = heap();
for (let i = 0; i < 100_000; i++) await wideCache.set('wide:' + i, value);
const wide = heap() - before;
console.log(JSON.stringify({ empty, full, after, first, last, wide }));
`);
    const { empty, full, after, first, last, wide } = result;
    console.log(
      `heap after GC: ${mb(full - empty)} MB at 10,000 keys, ${mb(after - empty)} MB at ${KEYS}; ` +
        `${mb(wide)} MB for 100,000 copies with maxEntries 100,000`,
    );
    expect(first).toBeNull();
    expect(last).toEqual({ name: 'a report', rows: [1, 2, 3] });
    expect(after - full).toBeLessThan(1e6);
    expect(wide).toBeGreaterThan(10e6);
  }, 240_000);
});
