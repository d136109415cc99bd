import { performance } from 'node:perf_hooks';
import { BufferCache, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { MAX_POINTS, slowestOverTime, writeChart, type Series } from './chart.js';
import {
  fmt,
  fmtInt,
  sleep,
  summarize,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';

const TTL_S = 1;
const BUILD_MS = 50;
/** Read loops per cache; each reads, waits EVERY_MS, and reads again. */
const READERS = 32;
const EVERY_MS = 2;
const silent = { log() {}, warn() {}, error() {} };

interface Case {
  readonly label: string;
  readonly ttl: number;
  readonly earlyRefresh: boolean | number;
}

interface Row {
  readonly reads: number;
  readonly met: number;
  readonly builds: number;
  readonly maxConcurrent: number;
  readonly p50: number;
  readonly p99: number;
  /** Per read, in the order they ended: its latency (ms) and when it ended (s after the start). */
  readonly latencies: readonly number[];
  readonly servedAt: readonly number[];
}

/**
 * Two caches on clients of their own (two workers, in this process), READERS loops each on one
 * hot key with `grace: 0`, for `windows` ttls. `met`: reads that found no fresh entry (a miss:
 * they waited for a build or built); builds and how many ran at once, in the whole fleet.
 */
async function hotKey(context: BenchContext, at: Case, windows: number): Promise<Row> {
  const parts = [0, 1].map(() => {
    const client = context.redis.client();
    const lock = new RedisLockService({ redis: client, namespace: `bench:early:${at.label}:` });
    const engine = new SingleFlightEngine({ lock, options: { logger: silent } });
    return {
      client,
      engine,
      cache: new BufferCache({ lock, engine, options: { logger: silent } }),
    };
  });
  const options = { ttl: at.ttl, grace: 0, earlyRefresh: at.earlyRefresh };
  let builds = 0;
  let running = 0;
  let maxConcurrent = 0;
  const factory = async (): Promise<{ at: number }> => {
    builds++;
    maxConcurrent = Math.max(maxConcurrent, ++running);
    await sleep(BUILD_MS);
    running--;
    return { at: Date.now() };
  };
  try {
    await parts[0]!.cache.getOrSet('hot', factory, options);
    builds = 0;
    maxConcurrent = 0;
    let met = 0;
    for (const { cache } of parts) cache.on('miss', () => met++);
    const samples: number[] = [];
    const servedAt: number[] = [];
    const begin = performance.now();
    const end = Date.now() + windows * TTL_S * 1000;
    await Promise.all(
      parts.flatMap(({ cache }) =>
        Array.from({ length: READERS }, async () => {
          while (Date.now() < end) {
            const started = performance.now();
            await cache.getOrSet('hot', factory, options);
            const now = performance.now();
            samples.push(now - started);
            servedAt.push((now - begin) / 1000);
            await sleep(EVERY_MS);
          }
        }),
      ),
    );
    // oxlint-disable-next-line no-unmodified-loop-condition -- the factories still running change it
    while (running > 0) await sleep(10);
    const { p50, p99 } = summarize(samples);
    return {
      reads: samples.length,
      met,
      builds,
      maxConcurrent,
      p50,
      p99,
      latencies: samples,
      servedAt,
    };
  } finally {
    for (const { client, engine } of parts) {
      engine.close();
      client.disconnect();
    }
  }
}

async function earlyRefresh(context: BenchContext): Promise<void> {
  const windows = context.quick ? 2 : 20;
  const cases: Case[] = [
    { label: 'hit path: ttl 3600 s, no expiry', ttl: 3600, earlyRefresh: false },
    { label: `ttl ${TTL_S} s, grace 0, earlyRefresh off`, ttl: TTL_S, earlyRefresh: false },
    {
      label: `ttl ${TTL_S} s, grace 0, earlyRefresh: true (β = 1)`,
      ttl: TTL_S,
      earlyRefresh: true,
    },
  ];
  const rows: string[][] = [];
  const series: Series[] = [];
  const measured: Row[] = [];
  for (const at of cases) {
    const row = await hotKey(context, at, windows);
    measured.push(row);
    series.push(slowestOverTime(at.label, row.servedAt, row.latencies, at.earlyRefresh !== false));
    rows.push([
      at.label,
      fmtInt(row.reads),
      fmtInt(row.met),
      fmtInt(row.builds),
      fmt(row.builds / windows, 2),
      String(row.maxConcurrent),
      fmt(row.p50, 2),
      fmt(row.p99, 2),
    ]);
  }
  const [hitPath, , early] = measured as [Row, Row, Row];
  const perWindow = early.builds / windows;
  target('early refresh, grace 0: 0 reads meet an expiry', fmtInt(early.met), early.met === 0);
  target(
    'early refresh, grace 0: never 2 builds at once in the fleet',
    `${early.maxConcurrent} at most`,
    early.maxConcurrent <= 1,
  );
  target(
    'early refresh, grace 0: ≤ 2 builds per ttl on average',
    `${fmt(perWindow, 2)} (${fmtInt(early.builds)} in ${windows} windows)`,
    perWindow <= 2,
  );
  target(
    'early refresh, grace 0: p99 within 2 ms of the hit path p99',
    `${fmt(early.p99, 2)} vs ${fmt(hitPath.p99, 2)} ms`,
    early.p99 - hitPath.p99 <= 2,
  );
  const chart = writeChart(
    context,
    'chart-early-refresh.svg',
    {
      title: `Early refresh: one hot key, ttl ${TTL_S} s, ${2 * READERS} read loops, ${BUILD_MS} ms build`,
      xLabel: 's since the reads began (when each read was served)',
      yLabel: 'slowest read in each slice of time, ms',
      yScale: 'log',
      series,
    },
    `The chart: each case's one run, cut into ${MAX_POINTS} slices of time ` +
      `(${fmt((windows * TTL_S * 1000) / MAX_POINTS, 0)} ms each); each point is the slowest read ` +
      `served in its slice, so a read that met an expiry shows as a spike (one a ttl with ` +
      `earlyRefresh off).`,
  );
  context.report.add(
    `## 9. Early refresh\n\n` +
      `One hot key, read by ${READERS} loops in each of two caches on clients of their own (two ` +
      `workers in one process, one redis-server), a read every ${EVERY_MS} ms per loop, over ` +
      `${windows} windows of the ttl; the build takes ${BUILD_MS} ms. "Met an expiry": reads that ` +
      `found no fresh entry and waited for a build. Builds are counted in the whole fleet, and ` +
      `"at once" is the most that ran together.\n\n` +
      table(
        [
          'case',
          'reads',
          'met an expiry',
          'builds',
          'builds per window',
          'at once',
          'p50 ms',
          'p99 ms',
        ],
        rows,
      ) +
      (chart && `\n${chart}`),
  );
}

export const earlyRefreshSection: BenchSection = {
  id: 'early-refresh',
  title: '9. Early refresh',
  run: earlyRefresh,
};
