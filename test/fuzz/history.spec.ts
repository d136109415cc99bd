import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { summarize } from './history-checker.js';
import { FAULT_KINDS, HistoryFleet, type RoundResult, type RoundSetup } from './history.run.js';

/**
 * What was deleted or replaced is not served again: 3 worker processes on one redis-server make
 * random `getOrSet`, `get`, `@Cached`, `set`, `delete`, `deleteByTag`, `@CachePut` and `@CacheEvict`
 * calls, with builds of random length, over a source of truth whose rows each write bumps, while
 * the server's subscribers are killed, it is paused, restarted empty, flushed and short of memory.
 * No read may return a value that an invalidation which returned before the read began had
 * replaced (see history-checker.ts for the exceptions, each within its documented bound).
 * `HISTORY_SEED` replays another seed.
 */

const FILE = 'test/fuzz/history.spec.ts';
const SEED = Number(process.env['HISTORY_SEED'] || 20_261_205);
const ROUND_MS = 3500;

let fleet: HistoryFleet;
beforeAll(async () => {
  fleet = await HistoryFleet.start(3);
}, 120_000);
afterAll(() => fleet?.stop());

const rounds: readonly (RoundSetup & { name: string })[] = [
  { name: 'the built-in store without l1', store: 'built-in' },
  { name: 'the built-in store with l1 (maxAge 1 s)', store: 'built-in', l1MaxAge: 1 },
  { name: 'a Keyv store (@keyv/redis) without l1', store: 'keyv' },
  { name: 'a Keyv store (@keyv/redis) with l1 (maxAge 1 s)', store: 'keyv', l1MaxAge: 1 },
];

/** The round's stale reads by kind, and enough of the first ones to follow them. */
function report(result: RoundResult): string[] {
  const { check } = result;
  if (check.violations.length === 0) return [];
  const first = check.violations.slice(0, 3).map((v) => JSON.stringify(v));
  const failed = [...result.failed].map(([why, n]) => `${n} calls failed: ${why}`);
  return [
    `seed ${result.seed}: ${check.violations.length} stale reads of ${check.readsChecked} ` +
      `(replay: HISTORY_SEED=${SEED} npx vitest run --config test/vitest.config.ts ${FILE})`,
    ...summarize(check.violations),
    `faults: ${result.history.faults.map((f) => f.kind).join(', ')}`,
    `calls ${result.calls}, drained in ${result.drainMs.toFixed(0)} ms, swept in ${result.sweepMs.toFixed(0)} ms, worst event-loop delay ${result.lagMs.toFixed(1)} ms, clocks within ${result.clockMs.toFixed(3)} ms`,
    ...failed,
    ...first,
  ];
}

describe('the history of 3 worker processes under faults', () => {
  rounds.forEach(({ name, ...setup }, i) => {
    it(`${name}: no read serves a value replaced before it began`, async () => {
      const result = await fleet.run(setup, {
        seed: SEED + i,
        durationMs: ROUND_MS,
        concurrency: 6,
        faults: FAULT_KINDS,
        faultEveryMs: 700,
      });
      expect(result.check.readsChecked).toBeGreaterThan(100);
      expect(result.check.invalidations).toBeGreaterThan(20);
      expect(result.history.faults.length).toBeGreaterThan(2);
      expect(report(result)).toEqual([]);
    }, 60_000);
  });
});
