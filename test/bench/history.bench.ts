import { summarize } from '../fuzz/history-checker.js';
import {
  FAULT_KINDS,
  HistoryFleet,
  type FaultKind,
  type RoundResult,
  type RoundSetup,
} from '../fuzz/history.run.js';
import { fmt, fmtInt, table, target, type BenchContext, type BenchSection } from './harness.js';

/** The run's seed; `BENCH_HISTORY_SEED` replays another. Each round adds its index. */
const SEED = Number(process.env['BENCH_HISTORY_SEED'] || 20_261_205);

interface Round extends RoundSetup {
  readonly label: string;
  readonly faults?: readonly FaultKind[];
  readonly faultEveryMs?: number;
}

const ROUNDS: readonly Round[] = [
  { label: 'built-in store', store: 'built-in' },
  { label: 'built-in store, l1 maxAge 1 s', store: 'built-in', l1MaxAge: 1 },
  { label: 'Keyv (@keyv/redis)', store: 'keyv' },
  { label: 'Keyv (@keyv/redis), l1 maxAge 1 s', store: 'keyv', l1MaxAge: 1 },
  {
    label: 'Redis Cluster, l1 maxAge 1 s, failovers',
    store: 'built-in',
    cluster: true,
    l1MaxAge: 1,
    faults: ['failover'],
    faultEveryMs: 5000,
  },
  {
    label: 'Redis Cluster, l1 maxAge 1 s, failovers, writeReplicas 1',
    store: 'built-in',
    cluster: true,
    l1MaxAge: 1,
    writeReplicas: 1,
    faults: ['failover'],
    faultEveryMs: 5000,
  },
];

/** The long run of test/fuzz/history.spec.ts: the same fleet and checker, for minutes. */
export const historySection: BenchSection = {
  id: 'history',
  title: '12. Stale reads under faults (history check)',
  async run({ quick, report }: BenchContext) {
    const durationMs = quick ? 3000 : 30_000;
    const fleet = await HistoryFleet.start(3);
    const results: RoundResult[] = [];
    try {
      for (const [i, { label: _label, faults, faultEveryMs, ...setup }] of ROUNDS.entries()) {
        results.push(
          await fleet.run(setup, {
            seed: SEED + i,
            durationMs,
            concurrency: 6,
            faults: faults ?? FAULT_KINDS,
            faultEveryMs: faultEveryMs ?? 700,
          }),
        );
      }
    } finally {
      await fleet.stop();
    }
    const rows = results.map((r, i) => {
      const faults = r.history.faults.length;
      const failed = [...r.failed.values()].reduce((a, b) => a + b, 0);
      return [
        ROUNDS[i]!.label,
        String(r.seed),
        fmtInt(r.calls),
        fmtInt(failed),
        fmtInt(r.check.readsChecked),
        fmtInt(r.check.invalidations),
        fmtInt(faults),
        fmtInt(r.check.violations.length),
        fmtInt(r.check.allowed.length),
        fmt(r.check.worstStalenessMs, 1),
      ];
    });
    const kinds = results.flatMap((r, i) =>
      summarize(r.check.violations).map((line) => `- ${ROUNDS[i]!.label}: ${line}`),
    );
    const allowed = results.flatMap((r, i) =>
      [...new Set(r.check.allowed.map((a) => a.allowed!))].flatMap((exception) =>
        summarize(r.check.allowed.filter((a) => a.allowed === exception)).map(
          (line) => `- ${ROUNDS[i]!.label}: ${line}, \`${exception}\``,
        ),
      ),
    );
    report.add(
      `## ${historySection.title}\n\n` +
        `3 worker processes on one redis-server, ${durationMs / 1000} s a round: random ` +
        '`getOrSet`, `get`, `@Cached`, `set`, `delete`, `deleteByTag`, `@CachePut` and ' +
        '`@CacheEvict` calls (6 in flight, builds of 0 to 150 ms) over a source of truth whose ' +
        'rows each write bumps, while the server has its subscribers killed, is paused, restarted ' +
        'empty, flushed, or short of memory (allkeys-lru), one fault every 0.35 to 1.05 s; on ' +
        'the Cluster (three masters, a replica each, node timeout 1 s) the master of the slot of ' +
        'the cache’s channel and tag versions is killed every 2.5 to 7.5 s, its replica promoted, ' +
        'and it rejoins as a replica. A stale ' +
        'read returned a value that an invalidation which returned before the read began had ' +
        'replaced (test/fuzz/history-checker.ts); allowed: within `l1.maxAge` (or the tag ' +
        'versions’ trust) of an invalidation made under a fault. Staleness: from the ' +
        'invalidation’s return to the stale read’s start. Replay a round with ' +
        '`BENCH_HISTORY_SEED=<seed minus its index>`.\n\n' +
        table(
          [
            'fleet',
            'seed',
            'calls',
            'failed calls',
            'reads checked',
            'invalidations',
            'faults injected',
            'stale reads',
            'allowed',
            'worst staleness ms',
          ],
          rows,
        ) +
        (kinds.length > 0 ? `\nStale reads by kind:\n\n${kinds.join('\n')}\n` : '') +
        (allowed.length > 0 ? `\nAllowed by an exception:\n\n${allowed.join('\n')}\n` : ''),
    );
    const stale = results.reduce((n, r) => n + r.check.violations.length, 0);
    const checked = results.reduce((n, r) => n + r.check.readsChecked, 0);
    target(
      'no read serves a value replaced before it began (history check, under faults)',
      `${fmtInt(stale)} stale of ${fmtInt(checked)} reads`,
      stale === 0,
    );
  },
};
