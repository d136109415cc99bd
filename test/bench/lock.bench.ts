import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { ExecutionError, Redlock } from '@sesamecare-oss/redlock';
import type { Redis } from 'ioredis';
import { Mutex } from 'redis-semaphore';
import { createLock, IoredisAdapter, LockAcquisitionError } from 'redlock-universal';
import { createClient } from 'redis';
import { RedisLockService } from '../../lib/index.js';
import type { LockClient, RedisScriptClient } from '../../lib/index.js';

type NodeRedisConnection = Exclude<LockClient, RedisScriptClient>;
import { baselineRowName, loadBaseline, type BaselineService } from './baseline.js';
import {
  collectGarbage,
  concat,
  fmt,
  fmtInt,
  fmtRatio,
  median,
  percentile,
  redisCpuSeconds,
  selected,
  summarize,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';

/** One way to take and give back a lock; resolves whether the lock was taken. */
export interface LockStrategy {
  readonly name: string;
  /**
   * The floor, the least a safe lock does, us, us at `--baseline`, a peer, or a reference point
   * that is none of them.
   */
  readonly kind: 'floor' | 'safe floor' | 'ours' | 'baseline' | 'peer' | 'reference';
  pair(key: string): Promise<boolean>;
}

const TTL_MS = 60_000;

const COMPARE_AND_DELETE_SOURCE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`;
const COMPARE_AND_DELETE = {
  source: COMPARE_AND_DELETE_SOURCE,
  sha: createHash('sha1').update(COMPARE_AND_DELETE_SOURCE).digest('hex'),
};

/** A `RedisLockService` as a strategy: acquire, and release what was taken. */
const serviceStrategy = (
  name: string,
  kind: LockStrategy['kind'],
  service: RedisLockService,
): LockStrategy => ({
  name,
  kind,
  async pair(key) {
    const [guard] = await service.acquire(key);
    if (!guard) return false;
    await service.release(guard);
    return true;
  },
});

/** The rows beyond the peers and us that a run may add. */
export interface ExtraLockRows {
  /** A client made with `enableAutoPipelining: true`: our service on it. */
  readonly autoPipelined?: Redis;
  /** A node-redis 6 client on the same server: our service on it. */
  readonly nodeRedis?: NodeRedisConnection;
  /** `--baseline`: the service as built at another commit, on `client` too. */
  readonly baseline?: { readonly ref: string; readonly Service: BaselineService };
}

/**
 * The peers and us, all on `client`, every one without retries or waiting, and the rows of
 * `extra`.
 */
export async function lockStrategies(
  client: Redis,
  { autoPipelined, nodeRedis, baseline }: ExtraLockRows = {},
): Promise<LockStrategy[]> {
  await client.script('LOAD', COMPARE_AND_DELETE.source);
  let next = 0;
  const ours = new RedisLockService({
    redis: client,
    namespace: 'bench:ours:',
    ttl: TTL_MS / 1000,
  });
  // The same service on a client that has no pipeline(), so its commands are never batched: the
  // batching's own gain or loss on this machine, in the same run.
  const unbatched = new RedisLockService({
    redis: {
      eval: (...args: Parameters<Redis['eval']>) => client.eval(...args),
      evalsha: (...args: Parameters<Redis['evalsha']>) => client.evalsha(...args),
      set: (key: string, value: string, px: 'PX', ms: number, nx: 'NX') =>
        client.set(key, value, px, ms, nx),
    },
    namespace: 'bench:unbatched:',
    ttl: TTL_MS / 1000,
  });
  // On a client that auto-pipelines, batchingClient() hands the client back as it is: ioredis
  // batches the commands of one event-loop turn by itself.
  const autoPipelining = autoPipelined
    ? [
        serviceStrategy(
          'RedisLockService, ioredis auto-pipelining',
          'reference',
          new RedisLockService({
            redis: autoPipelined,
            namespace: 'bench:autopipelined:',
            ttl: TTL_MS / 1000,
          }),
        ),
      ]
    : [];
  // node-redis writes the commands of one event-loop turn together by itself; the service sends
  // each command as it comes.
  const onNodeRedis = nodeRedis
    ? [
        serviceStrategy(
          'RedisLockService, node-redis 6',
          'reference',
          new RedisLockService({
            redis: nodeRedis,
            namespace: 'bench:node-redis:',
            ttl: TTL_MS / 1000,
          }),
        ),
      ]
    : [];
  // The same row as ours, on the same client, with the library of another commit.
  const atBaseline = baseline
    ? [
        serviceStrategy(
          baselineRowName(baseline.ref),
          'baseline',
          new baseline.Service({
            redis: client,
            namespace: 'bench:baseline:',
            ttl: TTL_MS / 1000,
          }),
        ),
      ]
    : [];
  const redlock = new Redlock([client], { retryCount: 0 });
  const adapter = new IoredisAdapter(client);
  const universal = (mode: 'standard' | 'lean'): LockStrategy => ({
    name: `redlock-universal (${mode})`,
    kind: 'peer',
    async pair(key) {
      const lock = createLock({ adapter, key, ttl: TTL_MS, retryAttempts: 0, performance: mode });
      try {
        await lock.release(await lock.acquire());
        return true;
      } catch (error) {
        if (error instanceof LockAcquisitionError) return false;
        throw error;
      }
    },
  });
  return [
    {
      // The same two round trips with no safety: no token check, no script.
      name: 'floor: SET NX PX + DEL',
      kind: 'floor',
      async pair(key) {
        if ((await client.set(key, '1', 'PX', TTL_MS, 'NX')) !== 'OK') return false;
        await client.del(key);
        return true;
      },
    },
    serviceStrategy('RedisLockService', 'ours', ours),
    ...atBaseline,
    serviceStrategy('RedisLockService, unbatched', 'reference', unbatched),
    ...autoPipelining,
    ...onNodeRedis,
    {
      // The least a safe lock can do: the floor's SET, and a compare-and-delete script in place
      // of DEL (without the key hashing, token and result checks of a library).
      name: 'safe floor: SET NX PX + Lua compare-and-delete',
      kind: 'safe floor',
      async pair(key) {
        const token = `${key}:${next++}`;
        if ((await client.set(key, token, 'PX', TTL_MS, 'NX')) !== 'OK') return false;
        await client.evalsha(COMPARE_AND_DELETE.sha, 1, key, token);
        return true;
      },
    },
    {
      // refreshInterval 0: no auto-refresh timer, like the others here.
      name: 'redis-semaphore Mutex',
      kind: 'peer',
      async pair(key) {
        const mutex = new Mutex(client, key, {
          lockTimeout: TTL_MS,
          acquireAttemptsLimit: 1,
          acquireTimeout: TTL_MS,
          retryInterval: 0,
          refreshInterval: 0,
        });
        if (!(await mutex.tryAcquire())) return false;
        await mutex.release();
        return true;
      },
    },
    {
      name: '@sesamecare-oss/redlock',
      kind: 'peer',
      async pair(key) {
        try {
          await (await redlock.acquire([key], TTL_MS)).release();
          return true;
        } catch (error) {
          if (error instanceof ExecutionError) return false;
          throw error;
        }
      },
    },
    universal('standard'),
    universal('lean'),
  ];
}

interface Scenario {
  readonly name: string;
  readonly concurrency: number;
  readonly hot: boolean;
}

interface RoundResult {
  readonly opsPerSec: number;
  /** CPU time of this process, and of redis-server, per pair: steadier than wall time under load. */
  readonly nodeCpuUs: number;
  readonly redisCpuUs: number;
  readonly acquiredShare: number;
  readonly latencies: Float64Array;
}

/** `concurrency` loops on one connection, each doing pairs back to back for `durationMs`. */
async function load(
  strategy: LockStrategy,
  scenario: Scenario,
  durationMs: number,
  prefix: string,
  admin: Redis,
): Promise<RoundResult> {
  const latencies: number[] = [];
  let acquired = 0;
  let next = 0;
  // Every run starts on a collected heap: the garbage of the run before is not collected on this
  // run's time.
  collectGarbage();
  const redisCpu0 = await redisCpuSeconds(admin);
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + durationMs;
  const loop = async (): Promise<void> => {
    while (performance.now() < end) {
      const key = scenario.hot ? `${prefix}hot` : `${prefix}${next++}`;
      const t0 = performance.now();
      if (await strategy.pair(key)) acquired++;
      latencies.push(performance.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: scenario.concurrency }, loop));
  const elapsed = performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  const redisCpu = (await redisCpuSeconds(admin)) - redisCpu0;
  return {
    opsPerSec: (latencies.length / elapsed) * 1000,
    nodeCpuUs: (cpu.user + cpu.system) / latencies.length,
    redisCpuUs: (redisCpu * 1e6) / latencies.length,
    acquiredShare: acquired / latencies.length,
    latencies: Float64Array.from(latencies),
  };
}

/**
 * A 95 % confidence interval for the median of `sorted` (ascending) that assumes nothing of the
 * distribution: the k-th smallest and k-th largest value, for the largest k with
 * P(Binomial(n, ½) < k) ≤ 2.5 %. `undefined` below 6 values, where no such k exists.
 */
export function medianInterval(sorted: readonly number[]): [number, number] | undefined {
  const n = sorted.length;
  let k = 0;
  let below = 0; // P(X < k + 1), built up term by term
  let term = 0.5 ** n; // P(X = 0)
  for (let i = 0; i < n; i++) {
    if (below + term > 0.025) break;
    below += term;
    k = i + 1;
    term *= (n - i) / (i + 1);
  }
  return k === 0 ? undefined : [sorted[k - 1]!, sorted[n - k]!];
}

/** `a`'s ratio over `b`'s in each round, ascending: both over the floor runs beside them. */
function pairedQuotients(
  a: LockStrategy,
  b: LockStrategy,
  ratios: ReadonlyMap<LockStrategy, number[]>,
): number[] {
  const theirs = ratios.get(b)!;
  return ratios
    .get(a)!
    .map((ratio, i) => ratio / theirs[i]!)
    .toSorted((x, y) => x - y);
}

/**
 * One row over another, round by round: both ratios come from the same round, each over the floor
 * runs beside it, so the machine's drift between rounds cancels out of their quotient.
 */
function against(
  ours: LockStrategy,
  other: LockStrategy,
  ratios: ReadonlyMap<LockStrategy, number[]>,
  results: ReadonlyMap<LockStrategy, RoundResult[]>,
): string {
  const quotients = pairedQuotients(ours, other, ratios);
  const cpu = (strategy: LockStrategy): string =>
    fmt(median(results.get(strategy)!.map((r) => r.nodeCpuUs)), 1);
  const interval = medianInterval(quotients);
  return (
    `${ours.name} over ${other.name}, round by round: median ${fmtRatio(median(quotients))} ` +
    `(95 % confidence ${interval ? interval.map(fmtRatio).join('–') : 'needs 6 rounds or more'}), ` +
    `middle half ${fmtRatio(percentile(quotients, 25))}–${fmtRatio(percentile(quotients, 75))}, ` +
    `${quotients.filter((q) => q >= 1).length} of ${quotients.length} rounds at 1.00× or more; ` +
    `Node µs CPU/pair ${cpu(ours)} vs ${cpu(other)}.\n`
  );
}

export const lockSection: BenchSection = {
  id: 'lock',
  title: '1. Lock micro-benchmark',
  async run(context: BenchContext) {
    const { quick, redis, report } = context;
    const client = redis.client();
    const admin = redis.client();
    const autoPipelined = redis.client({ enableAutoPipelining: true });
    const nodeRedis = createClient({ url: redis.url });
    nodeRedis.on('error', () => {});
    await nodeRedis.connect();
    const baseline = context.baseline && {
      ref: context.baseline.ref,
      Service: await loadBaseline(context.baseline.entry),
    };
    const strategies = (
      await lockStrategies(client, { autoPipelined, nodeRedis, baseline })
    ).filter(
      (s) =>
        s.kind === 'floor' ||
        s.kind === 'safe floor' ||
        s.kind === 'ours' ||
        s.kind === 'baseline' ||
        selected(context, s.name),
    );
    const scenarios: Scenario[] = [
      { name: 'c=1, distinct keys', concurrency: 1, hot: false },
      { name: 'c=64, distinct keys', concurrency: 64, hot: false },
      { name: 'c=1, one hot key', concurrency: 1, hot: true },
      { name: 'c=64, one hot key', concurrency: 64, hot: true },
    ];
    // Many short rounds: the median of per-round ratios shrugs off a busy neighbour's bursts.
    const rounds = context.rounds ?? (quick ? 1 : 15);
    const durationMs = quick ? 100 : 300;
    const floorStrategy = strategies.find((s) => s.kind === 'floor')!;
    const others = strategies.filter((s) => s !== floorStrategy);
    report.add(
      `## 1. Lock micro-benchmark\n\n` +
        `Acquire+release pairs on one connection (ioredis, but for the node-redis row); each loop starts its next pair when the ` +
        `last one ends. ${rounds} rounds; in each, every strategy runs ${durationMs} ms with a ` +
        `floor run of ${durationMs} ms right before and right after it (the order of the ` +
        `strategies rotates every round). A strategy's ratio in a round is its throughput over the ` +
        `mean of those two floor runs, so a slow drift of the machine's speed cancels out; the ` +
        `table gives the median of these ratios, the median throughput over rounds, and ` +
        `latencies (ms) pooled over all rounds. Each run starts after a forced GC, so no run ` +
        `pays for the garbage of the one before. ` +
        `On the hot key most pairs at c=64 find the lock busy ("taken" is the share that got it). ` +
        `CPU per pair (medians over rounds) is steadier than wall time on a busy machine: it shows ` +
        `where each strategy spends. Peers: no retries, no waiting, no auto-refresh timer. The ` +
        `safe floor is no library: it is the least a safe lock does (SET NX PX, then a Lua ` +
        `compare-and-delete), so its gap to the floor is the price of safety itself. The ` +
        `unbatched row is RedisLockService on a client without pipeline(): every command sent ` +
        `as it comes, so its gap to our row is what batching gains or costs on this machine. The ` +
        `auto-pipelining row is RedisLockService on a connection of its own made with ioredis ` +
        `\`enableAutoPipelining: true\`, where the service leaves batching to ioredis. The node-redis ` +
        `row is RedisLockService on a node-redis 6 client (\`createClient()\`) of its own, on the ` +
        `same server: node-redis writes the commands of one event-loop turn together.` +
        (baseline
          ? ` The row "${baselineRowName(baseline.ref)}" is the same service on the same client, ` +
            `built from commit ${context.baseline!.commit} (\`--baseline\`); under each table, our ` +
            `row over it, from the two ratios of each round.`
          : '') +
        `\n`,
    );
    for (const scenario of scenarios) {
      report.progress(`lock: ${scenario.name}`);
      const results = new Map<LockStrategy, RoundResult[]>(strategies.map((s) => [s, []]));
      const ratios = new Map<LockStrategy, number[]>(strategies.map((s) => [s, []]));
      let slot = 0;
      const run = (strategy: LockStrategy): Promise<RoundResult> =>
        load(strategy, scenario, durationMs, `bench:${slot++}:${scenario.concurrency}:`, admin);
      // Round -1 warms up and is not recorded.
      for (let round = -1; round < rounds; round++) {
        const offset = ((round % others.length) + others.length) % others.length;
        let before = await run(floorStrategy);
        if (round >= 0) results.get(floorStrategy)!.push(before);
        for (let i = 0; i < others.length; i++) {
          const strategy = others[(i + offset) % others.length]!;
          const result = await run(strategy);
          const after = await run(floorStrategy);
          if (round >= 0) {
            results.get(strategy)!.push(result);
            results.get(floorStrategy)!.push(after);
            ratios
              .get(strategy)!
              .push(result.opsPerSec / ((before.opsPerSec + after.opsPerSec) / 2));
          }
          before = after;
        }
      }
      ratios.set(floorStrategy, [1]);
      const rows = strategies.map((strategy) => {
        const mine = results.get(strategy)!;
        const ratio = median(ratios.get(strategy)!);
        const pooled = summarize(concat(mine.map((r) => r.latencies)));
        return {
          strategy,
          ratio,
          cells: [
            strategy.name,
            fmtInt(median(mine.map((r) => r.opsPerSec))),
            fmtRatio(ratio),
            fmt(pooled.p50, 3),
            fmt(pooled.p99, 3),
            fmt(pooled.p999, 3),
            fmt(median(mine.map((r) => r.nodeCpuUs)), 1),
            fmt(median(mine.map((r) => r.redisCpuUs)), 1),
            `${Math.round(median(mine.map((r) => r.acquiredShare)) * 100)}%`,
          ],
        };
      });
      report.add(
        `### ${scenario.name}\n\n` +
          table(
            [
              'strategy',
              'pairs/s',
              'vs floor',
              'p50 ms',
              'p99 ms',
              'p99.9 ms',
              'Node µs CPU/pair',
              'Redis µs CPU/pair',
              'taken',
            ],
            rows.map((r) => r.cells),
          ),
      );
      const baselineRow = rows.find((r) => r.strategy.kind === 'baseline');
      const oursRow = rows.find((r) => r.strategy.kind === 'ours');
      if (baselineRow && oursRow) {
        report.add(against(oursRow.strategy, baselineRow.strategy, ratios, results));
      }
      if (!scenario.hot) {
        const ours = rows.find((r) => r.strategy.kind === 'ours');
        const safe = rows.find((r) => r.strategy.kind === 'safe floor');
        const peers = rows.filter((r) => r.strategy.kind === 'peer');
        if (!ours || !safe) continue;
        report.add(against(ours.strategy, safe.strategy, ratios, results));
        const overSafe = median(pairedQuotients(ours.strategy, safe.strategy, ratios));
        target(`lock ${scenario.name}: ≥ 0.9× floor`, fmtRatio(ours.ratio), ours.ratio >= 0.9);
        // At one caller every pair waits for its two round trips: parity is all there is to win.
        const least = scenario.concurrency === 1 ? 0.97 : 1.05;
        target(
          `lock ${scenario.name}: ≥ ${fmtRatio(least)} the safe floor (round by round)`,
          fmtRatio(overSafe),
          overSafe >= least,
        );
        const semaphore = peers.find((r) => r.strategy.name === 'redis-semaphore Mutex');
        if (semaphore) {
          report.add(against(ours.strategy, semaphore.strategy, ratios, results));
          const quotients = pairedQuotients(ours.strategy, semaphore.strategy, ratios);
          const ahead = quotients.filter((q) => q > 1).length;
          target(
            `lock ${scenario.name}: ahead of redis-semaphore Mutex (round by round)`,
            `median ${fmtRatio(median(quotients))}, ahead in ${ahead} of ${quotients.length} rounds`,
            median(quotients) > 1,
          );
        }
        if (peers.length === 0) continue;
        const bestPeer = peers.reduce((a, b) => (b.ratio > a.ratio ? b : a));
        target(
          `lock ${scenario.name}: above every peer`,
          `${fmtRatio(ours.ratio)} vs best peer ${bestPeer.strategy.name} ${fmtRatio(bestPeer.ratio)}`,
          ours.ratio > bestPeer.ratio,
        );
      }
    }
    client.disconnect();
    autoPipelined.disconnect();
    nodeRedis.destroy();
    admin.disconnect();
  },
};
