import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import {
  collectGarbage,
  fmtInt,
  fmtMb,
  sleep,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';
import { startRedis } from '../support/redis-server.js';
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

    await boundedState(context);

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

const ratio = (a: number, b: number): string => `${(((a - b) / b) * 100).toFixed(1)} %`;
const within = (a: number, b: number): boolean => Math.abs(a - b) <= 0.05 * b;

const usedMemory = async (client: Redis): Promise<number> =>
  Number(/used_memory:(\d+)/.exec(await client.info('memory'))![1]);

/**
 * Distinct keys locked with fencing, half by acquire/release, half by engine.run with a ttl of
 * its own per call: once the fence counters' bound (the lock's ttl + 1 s) has passed, the heap
 * after GC and Redis's used_memory are back where they started.
 */
async function boundedState({ quick, report }: BenchContext): Promise<void> {
  const keys = quick ? 50_000 : 1_000_000;
  const concurrency = 64;
  const ttl = 1;
  // A server of its own: keys other sections left would expire meanwhile and skew both counts.
  const redis = await startRedis();
  const client = redis.client();
  const admin = redis.client();
  const lock = new RedisLockService({
    redis: client,
    namespace: 'bench:bound:',
    ttl,
    fencing: true,
  });
  const engine = new SingleFlightEngine({ lock });
  report.progress(`memory: ${fmtInt(keys)} distinct keys locked with fencing`);
  let next = 0;
  let failures = 0;
  const runKeys = async (count: number): Promise<void> => {
    const loop = async (): Promise<void> => {
      while (next < count) {
        const i = next++;
        if (i % 2 === 0) {
          const [guard] = await lock.acquire(`bound:${i}`);
          if (!guard || !(await lock.release(guard))[0]) failures++;
        } else {
          const options = { ttl: ttl + (i % 997) / 1000, lockTimeout: 0.5 };
          if ((await engine.run(`bound:${i}`, () => i, options)) !== i) failures++;
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, loop));
  };
  const settle = async (): Promise<number> => {
    // Past the bound, then until Redis's active expiry has taken every key.
    await sleep((ttl + 1) * 1000 + 500);
    const deadline = Date.now() + 120_000;
    while ((await admin.dbsize()) > 0 && Date.now() < deadline) await sleep(250);
    return admin.dbsize();
  };
  await runKeys(Math.min(20_000, keys / 5));
  await settle();
  forceGc();
  const start = { heap: snapshot().heapUsed, redis: await usedMemory(admin) };
  const t0 = performance.now();
  next = 0;
  await runKeys(keys);
  const seconds = (performance.now() - t0) / 1000;
  forceGc();
  const end = {
    heap: snapshot().heapUsed,
    redis: await usedMemory(admin),
    keys: await admin.dbsize(),
  };
  const left = await settle();
  forceGc();
  const after = { heap: snapshot().heapUsed, redis: await usedMemory(admin) };
  engine.close();
  client.disconnect();
  admin.disconnect();
  await redis.stop();
  report.add(
    `### Bounded state: ${fmtInt(keys)} distinct keys locked, fencing on\n\n` +
      `Half by \`acquire\`/\`release\`, half by \`engine.run\` with a ttl of its own per call ` +
      `(${ttl}–${ttl + 0.996} s), concurrency ${concurrency}, in ${seconds.toFixed(1)} s, ` +
      `${failures} failed. "start" is after a warm-up, its keys expired and a forced GC; ` +
      `"after the bound" is once the fence counters' bound (the lock's ttl + 1 s) has passed and ` +
      `Redis holds no key of them (${left} left).\n\n` +
      table(
        ['', 'heap used after GC', 'Redis used_memory', 'Redis keys'],
        [
          ['start', fmtMb(start.heap), fmtMb(start.redis), '0'],
          ['right after the last key', fmtMb(end.heap), fmtMb(end.redis), fmtInt(end.keys)],
          ['after the bound', fmtMb(after.heap), fmtMb(after.redis), fmtInt(left)],
          [
            'after the bound vs start',
            ratio(after.heap, start.heap),
            ratio(after.redis, start.redis),
            '',
          ],
        ],
      ),
  );
  target(
    `memory: heap and Redis used_memory within 5 % of start once the bound passed (${fmtInt(keys)} keys)`,
    `heap ${ratio(after.heap, start.heap)}, Redis ${ratio(after.redis, start.redis)}, ${left} keys left`,
    within(after.heap, start.heap) && within(after.redis, start.redis) && left === 0,
  );
}
