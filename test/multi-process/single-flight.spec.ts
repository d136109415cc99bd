import { once } from 'node:events';
import type { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService } from '../../lib/index.js';
import { FAMILY_ENV, LOCK_FAMILIES, type ClientFamily } from '../support/client-families.js';
import { monitor } from '../support/monitor.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import type { Reply } from './flight.protocol.js';
import { compileWorkers, Worker, type Result } from './flight.workers.js';

/**
 * @SingleFlight across real worker processes (Nest application contexts compiled with tsc, as
 * child processes need runnable JavaScript), on a standalone Redis and on a real 3-master Cluster.
 * Every worker uses share: true and fencing: true (flight.worker.ts).
 */

const TTL = 10;

beforeAll(() => {
  compileWorkers();
}, 120_000);

interface Backend {
  env: Record<string, string>;
  /** Admin clients: one per node (INFO commandstats is per node). */
  nodes: Redis[];
  admin: Redis | Cluster;
  /** Whether the workers' clients subscribe, so that a release wakes the waiters (else they poll). */
  wakes: boolean;
  stop(): Promise<void>;
}

/** A standalone Redis, each worker's client of `family` (FAMILY_ENV tells the worker which). */
const standalone = (family: ClientFamily) => async (): Promise<Backend> => {
  const server: RedisServer = await startRedis();
  const admin = server.client();
  const env = { REDIS_URL: server.url, [FAMILY_ENV]: family.name };
  return { env, nodes: [admin], admin, wakes: family.wakes, stop: () => server.stop() };
};

const backends: Record<string, () => Promise<Backend>> = {
  ...Object.fromEntries(
    LOCK_FAMILIES.filter((family) => family.multiProcess).map((family) => [
      `a standalone Redis, through ${family.name}`,
      standalone(family),
    ]),
  ),
  async 'a 3-master Cluster, through ioredis Cluster'() {
    const cluster: RedisCluster = await startRedisCluster();
    return {
      env: { CLUSTER_PORTS: cluster.nodes.map((n) => n.port).join(',') },
      nodes: [0, 1, 2].map((i) => cluster.node(i)),
      admin: cluster.client(),
      wakes: true,
      stop: () => cluster.stop(),
    };
  },
};

/** Calls of every command so far, summed over the nodes. */
async function commandCalls(nodes: readonly Redis[]): Promise<Map<string, number>> {
  const calls = new Map<string, number>();
  for (const node of nodes) {
    for (const [, name, count] of String(await node.info('commandstats')).matchAll(
      /cmdstat_([^:]+):calls=(\d+)/g,
    )) {
      calls.set(name!, (calls.get(name!) ?? 0) + Number(count));
    }
  }
  return calls;
}

function delta(after: Map<string, number>, before: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, count] of after) {
    const d = count - (before.get(name) ?? 0);
    if (d > 0 && !['info', 'cluster|info', 'ping'].includes(name)) out[name] = d;
  }
  return out;
}

for (const [name, start] of Object.entries(backends)) {
  describe(`@SingleFlight across processes on ${name}`, () => {
    let backend: Backend;
    let workers: Worker[] = [];
    const ns = `mp:${name}:`;

    beforeAll(async () => {
      backend = await start();
      workers = await Promise.all(
        [0, 1, 2].map(() => Worker.start({ ...backend.env, NS: ns, TTL: String(TTL) })),
      );
    }, 120_000);
    afterAll(async () => {
      await Promise.all(workers.map((w) => w.stop()));
      await backend?.stop();
    });

    it('3 processes × 200 callers on one cold key, share: true: one run, 1 acquire per process when the release wakes them', async () => {
      const before = await commandCalls(backend.nodes);
      const replies = await Promise.all(
        workers.map((w) =>
          w.ask<Result>({ cmd: 'flight', key: 'cold', callers: 200, buildMs: 3000 }),
        ),
      );
      const commands = delta(await commandCalls(backend.nodes), before);
      console.log(`[${name}] Redis commands for 3 × 200 callers:`, JSON.stringify(commands));

      expect(replies.reduce((sum, r) => sum + r.runs, 0)).toBe(1);
      // Woken by the release, each process acquires once; a client without pub/sub polls instead,
      // so its waiting processes acquire again until the leader's result is there.
      if (backend.wakes) expect(replies.map((r) => r.acquires)).toEqual([1, 1, 1]);
      else expect(replies.every((r) => r.acquires >= 1)).toBe(true);
      const results = replies.flatMap((r) => r.results);
      expect(results).toHaveLength(600);
      const leader = results[0]!.value;
      for (const { value, resolvedAt } of results) {
        expect(value).toEqual(leader); // everyone got the leader's result
        expect(resolvedAt).toBeGreaterThanOrEqual(value.finishedAt); // after the leader
        expect(resolvedAt).toBeLessThan(value.startedAt + TTL * 1000); // before its TTL
      }
    }, 120_000);

    it('3 processes on one cold key, share: true: the waiting processes take the result from the wake-up and read nothing after it', async () => {
      const seen: string[][] = [];
      const stops = await Promise.all(
        backend.nodes.map((node) =>
          monitor(node, ({ source, args }) => void seen.push([source, ...args])),
        ),
      );
      let replies: Result[];
      try {
        replies = await Promise.all(
          workers.map((w) =>
            w.ask<Result>({ cmd: 'flight', key: 'carried', callers: 50, buildMs: 300 }),
          ),
        );
        await Promise.all(backend.nodes.map((node) => node.ping()));
        await new Promise((r) => setTimeout(r, 100));
      } finally {
        for (const stop of stops) stop();
      }
      expect(replies.reduce((sum, r) => sum + r.runs, 0)).toBe(1);
      const leader = replies.flatMap((r) => r.results)[0]!.value;
      expect(
        replies
          .flatMap((r) => r.results)
          .every(({ value }) => value.startedAt === leader.startedAt),
      ).toBe(true);
      if (!backend.wakes) return;
      const wake = seen.findIndex(
        ([source, command]) => source === 'lua' && command === 'SPUBLISH',
      );
      expect(wake).toBeGreaterThan(-1);
      expect(seen[wake]![3]!.startsWith('=r')).toBe(true);
      const resultReads = seen
        .slice(wake + 1)
        .filter(([, command, key]) => command?.toUpperCase() === 'GET' && key!.endsWith(':result'));
      expect(resultReads).toEqual([]);
    }, 120_000);

    it('fencing numbers strictly increase across processes', async () => {
      const fences: number[] = [];
      for (let round = 0; round < 5; round++) {
        for (const w of workers) {
          const reply = await w.ask<Extract<Reply, { fence: unknown }>>({
            cmd: 'fence',
            key: 'fenced',
          });
          fences.push(reply.fence!);
        }
      }
      expect(fences.every((f) => Number.isInteger(f) && f > 0)).toBe(true);
      expect(fences.every((f, i) => i === 0 || f > fences[i - 1]!)).toBe(true);
    }, 60_000);

    it('a holder killed with SIGKILL mid-build: a waiter in another process takes over after the TTL', async () => {
      const victimTtl = 2;
      const victim = await Worker.start({
        ...backend.env,
        NS: ns,
        TTL: String(victimTtl),
        LOCK_TIMEOUT: '1',
      });
      try {
        void victim.ask({ cmd: 'flight', key: 'orphaned', callers: 1, buildMs: 600_000 });
        const deadline = Date.now() + 30_000;
        while (!victim.started.includes('orphaned')) {
          if (Date.now() > deadline) throw new Error('the victim never started');
          await new Promise((r) => setTimeout(r, 10));
        }
        const waiting = workers[0]!.ask<Result>({
          cmd: 'flight',
          key: 'orphaned',
          callers: 5,
          buildMs: 10,
        });
        await new Promise((r) => setTimeout(r, 300));
        const killed = once(victim.process, 'exit');
        victim.process.kill('SIGKILL');
        await killed;
        const killedAt = Date.now();
        // The lock outlives its holder: the takeover waits for Redis to expire it.
        const key = new RedisLockService({ redis: backend.admin, namespace: ns }).redisKey(
          'orphaned',
        );
        expect(await backend.admin.pexpiretime(key)).toBeGreaterThan(killedAt);
        const reply = await waiting;
        expect(reply.runs).toBe(1);
        const [first] = reply.results;
        expect(first!.value.pid).toBe(workers[0]!.process.pid);
        expect(reply.results.every(({ value }) => value.startedAt === first!.value.startedAt)).toBe(
          true,
        );
        expect(first!.value.startedAt).toBeGreaterThan(killedAt);
        // Not before the lock could have expired: the watchdog last set it to ttl from now at
        // most ttl/3 before the kill, so it lived at least 2/3 ttl (1.33 s) past the kill.
        expect(first!.value.startedAt).toBeGreaterThanOrEqual(killedAt + 1000);
      } finally {
        await victim.stop();
      }
    }, 120_000);
  });
}
