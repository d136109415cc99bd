/**
 * Measures wake-on-release (not part of `npm test`; figures for the closing note):
 *
 * 1. latency from the holder's release to pub/sub waiters resolving (1 waiter and 50 waiters on
 *    one key), median and p99, on REDIS_URL (default the local redis://127.0.0.1:6379);
 * 2. Redis commands per wait cycle from INFO commandstats deltas, on a throwaway redis-server of
 *    its own so that nothing else is counted.
 *
 * Run:
 *   npx tsc -p tsconfig.json --outDir .build/measure && node .build/measure/test/redis/wake-latency.measure.js
 */
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { releaseChannel } from '../../lib/redis/keys.js';
import { ReleaseWait } from '../../lib/single-flight/release-wait.js';
import { releaseSubscriberFor } from '../../lib/single-flight/release-subscriber.js';
import { startRedis } from '../support/redis-server.js';

const ROUNDS = Number(process.env.ROUNDS ?? 300);
const now = (): number => performance.now();

type Waiter = Pick<ReleaseWait, 'waitForRelease'>;

/** The engine's waiter on `client`, its subscriber kept open `idleMs` after the last wait. */
function releaseWait(client: Redis, idleMs: number): ReleaseWait {
  releaseSubscriberFor(client, { idleMs });
  return new ReleaseWait(
    async () => client,
    () => {},
  );
}

/** For comparison: sleep 50 ms, jittered by a fifth either way, and try again. */
const polling: Waiter = {
  waitForRelease: (_key, deadline) =>
    new Promise((r) =>
      setTimeout(
        () => r(undefined),
        Math.min(50 * (0.8 + Math.random() * 0.4), deadline - Date.now()),
      ),
    ),
};

function pct(values: number[], p: number): number {
  const sorted = values.toSorted((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

async function shardSubscribers(admin: Redis, channel: string): Promise<number> {
  const reply = (await admin.call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
  return Number(reply[1]);
}

async function latency(url: string, waiters: number): Promise<{ median: number; p99: number }> {
  const holderClient = new Redis(url);
  const waiterClient = new Redis(url);
  const admin = new Redis(url);
  const holder = new RedisLockService({
    redis: holderClient,
    namespace: `measure:${process.pid}:`,
  });
  const strategy = releaseWait(waiterClient, 5000);
  const samples: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const [guard] = await holder.acquire(`k${round % 10}`, 30);
    let last = 0;
    const waits = Array.from({ length: waiters }, () =>
      strategy.waitForRelease(guard!.key, Date.now() + 30_000).then(() => {
        last = Math.max(last, now());
      }),
    );
    while ((await shardSubscribers(admin, releaseChannel(guard!.key))) < 1) {
      await new Promise((r) => setTimeout(r, 1));
    }
    // Let every waiter finish its PTTL read, so all of them are parked on the message.
    await new Promise((r) => setTimeout(r, 5));
    const t0 = now();
    await holder.release(guard!);
    await Promise.all(waits);
    samples.push(last - t0);
  }
  strategy.close();
  for (const c of [holderClient, waiterClient, admin]) c.disconnect();
  return { median: pct(samples, 50), p99: pct(samples, 99) };
}

/**
 * Release → the waiter holds the lock: the waiter loops "acquire, busy, wait" as the engine does,
 * with either strategy; the holder releases after a random 5-25 ms hold.
 */
async function handover(
  url: string,
  strategy: (client: Redis) => Waiter,
): Promise<{ median: number; p99: number }> {
  const holderClient = new Redis(url);
  const waiterClient = new Redis(url);
  const ns = `measure:h:${process.pid}:`;
  const holder = new RedisLockService({ redis: holderClient, namespace: ns });
  const waiter = new RedisLockService({ redis: waiterClient, namespace: ns });
  const wait = strategy(waiterClient);
  const samples: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const [held] = await holder.acquire('k', 30);
    const taking = (async () => {
      for (;;) {
        const [mine] = await waiter.acquire('k', 30);
        if (mine) return mine;
        await wait.waitForRelease(held!.key, Date.now() + 30_000);
      }
    })();
    await new Promise((r) => setTimeout(r, 5 + Math.random() * 20));
    const t0 = now();
    await holder.release(held!);
    const mine = await taking;
    samples.push(now() - t0);
    await waiter.release(mine);
  }
  for (const c of [holderClient, waiterClient]) c.disconnect();
  return { median: pct(samples, 50), p99: pct(samples, 99) };
}

async function commandstats(admin: Redis): Promise<Map<string, number>> {
  const info = await admin.info('commandstats');
  return new Map(
    [...info.matchAll(/cmdstat_([\w|]+):calls=(\d+)/g)].map(([, name, n]) => [name!, Number(n)]),
  );
}

async function commandsPerCycle(idleMs: number): Promise<Record<string, number>> {
  const server = await startRedis();
  try {
    const admin = server.client();
    const holder = new RedisLockService({ redis: server.client(), namespace: 'm:' });
    const waiterClient = server.client();
    const waiter = new RedisLockService({ redis: waiterClient, namespace: 'm:' });
    const strategy = releaseWait(waiterClient, idleMs);
    // Warm up: scripts loaded, connections made.
    const [g0] = await holder.acquire('warm');
    await holder.release(g0!);
    await waiter.acquire('warm').then(([g]) => waiter.release(g!));
    const cycle = async (): Promise<void> => {
      const [held] = await holder.acquire('k');
      const [busy] = await waiter.acquire('k'); // 1: the failed acquire
      if (busy) throw new Error('expected busy');
      const waiting = strategy.waitForRelease(held!.key, Date.now() + 30_000);
      while ((await shardSubscribers(admin, releaseChannel(held!.key))) === 0) {
        await new Promise((r) => setTimeout(r, 1));
      }
      await new Promise((r) => setTimeout(r, 20));
      await holder.release(held!);
      await waiting;
      const [mine] = await waiter.acquire('k');
      await waiter.release(mine!);
      // A cold subscriber is dropped between cycles; a warm one stays open.
      if (idleMs === 0) {
        while (String(await admin.call('CLIENT', 'LIST', 'TYPE', 'pubsub')) !== '') {
          await new Promise((r) => setTimeout(r, 5));
        }
      }
    };
    await cycle();
    const before = await commandstats(admin);
    const CYCLES = 10;
    for (let i = 0; i < CYCLES; i++) await cycle();
    const after = await commandstats(admin);
    const delta: Record<string, number> = {};
    for (const [name, calls] of after) {
      const d = (calls - (before.get(name) ?? 0)) / CYCLES;
      if (d > 0) delta[name] = d;
    }
    // The first INFO commandstats above is itself counted in the second.
    delta.info = (delta.info ?? 0) - 1 / CYCLES;
    if (delta.info <= 0) delete delta.info;
    // The measurement's own looks at the subscriptions.
    for (const name of Object.keys(delta)) if (/^(pubsub|client)/.test(name)) delete delta[name];
    strategy.close();
    return delta;
  } finally {
    await server.stop();
  }
}

async function main(): Promise<void> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  console.log(`release → waiter resolved, ${ROUNDS} rounds, ${url}`);
  for (const n of [1, 50]) {
    const { median, p99 } = await latency(url, n);
    console.log(
      `  ${n} waiter(s), last resolved: median ${median.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms`,
    );
  }
  console.log(`release → the waiter holds the lock, ${ROUNDS} rounds, ${url}`);
  const waits: ReleaseWait[] = [];
  const pubsub = (c: Redis): Waiter => {
    const wait = releaseWait(c, 5000);
    waits.push(wait);
    return wait;
  };
  for (const [name, make] of [
    ['pub/sub', pubsub],
    ['polling 50 ms', () => polling],
  ] as const) {
    const { median, p99 } = await handover(url, make);
    console.log(`  ${name}: median ${median.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms`);
  }
  for (const wait of waits) wait.close();
  console.log(
    'commands per wait cycle (holder acquire+release, waiter busy acquire, wait, acquire+release):',
  );
  console.log('  warm subscriber (idleMs 5000):', await commandsPerCycle(5000));
  console.log(
    '  cold subscriber (idleMs 0, connection made and dropped each cycle):',
    await commandsPerCycle(0),
  );
}

await main();
