import { performance } from 'node:perf_hooks';
import { RedisLockService } from '../../lib/index.js';
import {
  collectGarbage,
  fmtInt,
  fmtMb,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import { waitSubscriberProbe } from './features.js';

const forceGc = (): void => collectGarbage(4);

const snapshot = (): NodeJS.MemoryUsage => process.memoryUsage();

export const memorySection: BenchSection = {
  id: 'memory',
  title: '5. Memory',
  async run(context: BenchContext) {
    const { quick, redis, report } = context;
    const cycles = quick ? 50_000 : 1_000_000;
    const concurrency = 64;
    const client = redis.client();
    const lock = new RedisLockService({ redis: client, namespace: 'bench:memory:', ttl: 60 });
    report.progress(`memory: ${fmtInt(cycles)} acquire+release cycles`);

    // Warm up first so that JIT code, the client's buffers and script caches count as baseline.
    const runCycles = async (count: number): Promise<number> => {
      let next = 0;
      let failures = 0;
      const loop = async (): Promise<void> => {
        while (next < count) {
          const key = `memory:${next++}`;
          const [guard] = await lock.acquire(key);
          if (!guard) failures++;
          else if (!(await lock.release(guard))[0]) failures++;
        }
      };
      await Promise.all(Array.from({ length: concurrency }, loop));
      return failures;
    };
    await runCycles(Math.min(20_000, cycles / 5));
    forceGc();
    const start = snapshot();
    const t0 = performance.now();
    const failures = await runCycles(cycles);
    const seconds = (performance.now() - t0) / 1000;
    const end = snapshot();
    forceGc();
    const afterGc = snapshot();
    client.disconnect();

    const heapGrowth = afterGc.heapUsed - start.heapUsed;
    const rssGrowth = afterGc.rss - start.rss;
    report.add(
      `## 5. Memory\n\n` +
        `${fmtInt(cycles)} acquire+release cycles of \`RedisLockService\` (distinct keys, ` +
        `concurrency ${concurrency}, one connection) in ${seconds.toFixed(1)} s, ` +
        `${fmtInt(cycles / seconds)} cycles/s, ${failures} failed. "start" is after a warm-up ` +
        `and a forced GC.\n\n` +
        table(
          ['', 'heap used', 'RSS', 'external'],
          [
            ['start (after GC)', fmtMb(start.heapUsed), fmtMb(start.rss), fmtMb(start.external)],
            ['end', fmtMb(end.heapUsed), fmtMb(end.rss), fmtMb(end.external)],
            [
              'end, after forced GC',
              fmtMb(afterGc.heapUsed),
              fmtMb(afterGc.rss),
              fmtMb(afterGc.external),
            ],
            [
              'growth after GC',
              fmtMb(heapGrowth),
              fmtMb(rssGrowth),
              fmtMb(afterGc.external - start.external),
            ],
          ],
        ),
    );
    target(
      `memory: heap growth after GC over ${fmtInt(cycles)} cycles < 5 MB`,
      `${fmtMb(heapGrowth)} (RSS ${fmtMb(rssGrowth)})`,
      heapGrowth < 5 * 1024 * 1024,
    );

    const probe = await waitSubscriberProbe(context, quick ? 1_000 : 10_000);
    if (!probe) {
      report.add(
        `### Subscriber connections and listeners after waits\n\n` +
          `not available yet: @SingleFlight waits without a release subscriber (it polls).\n`,
      );
      target(
        'memory: connections and listeners back to baseline after waits',
        'not available yet',
        undefined,
      );
      return;
    }
    report.add(
      `### Subscriber connections and listeners after ${fmtInt(probe.waits)} waits\n\n` +
        probe.table,
    );
    target(
      'memory: connections and listeners back to baseline after waits',
      probe.summary,
      probe.backToBaseline,
    );
  },
};
