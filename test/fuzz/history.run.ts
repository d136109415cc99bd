import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Redis } from 'ioredis';
import { Worker } from '../multi-process/flight.workers.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  checkHistory,
  type CheckResult,
  type CheckerConfig,
  type Fault,
  type History,
  type Operation,
} from './history-checker.js';
import {
  KEYS,
  TAGS,
  keySpec,
  keysTagged,
  rowKeys,
  rowTag,
  sharedClock,
  type Call,
  type CallRecord,
  type FleetSetup,
  type HistoryCommand,
  type HistoryReply,
} from './history.protocol.js';

/**
 * The history run: worker processes (Nest application contexts) on one redis-server make random
 * cache calls, reads and invalidations, whose factories read a versioned source of truth on a
 * second redis-server, while the first one is faulted; every call's start and end is recorded on
 * the shared clock, and the history is checked (test/fuzz/history-checker.ts).
 */

// The repository: from test/fuzz/, or compiled, from .build/test/fuzz/ (the bench's build).
const root = new URL('../..', import.meta.url).pathname.replace(/\/\.build\/$/, '/');
const WORKER = '.build/history/test/fuzz/history.worker.js';

export type FaultKind =
  | 'pubsub-kill'
  | 'pause'
  | 'restart'
  | 'flushall'
  | 'maxmemory'
  /** On a Cluster round: the master of the cache's channel slot killed, its replica promoted. */
  | 'failover';

export const FAULT_KINDS: readonly FaultKind[] = [
  'pubsub-kill',
  'pause',
  'restart',
  'flushall',
  'maxmemory',
];

/** One round's fleet: its store and `l1`. */
export interface RoundSetup {
  readonly store: FleetSetup['store'];
  /** On a Redis Cluster (three masters, a replica each) instead of the single server. */
  readonly cluster?: boolean;
  /** `l1.maxAge`, seconds; none: no `l1`. */
  readonly l1MaxAge?: number;
  /** `writeReplicas.replicas`; none: writes do not wait for replicas. */
  readonly writeReplicas?: number;
}

export interface RoundOptions {
  readonly seed: number;
  /** How long calls are made, ms. */
  readonly durationMs: number;
  /** Calls in flight at once, over all workers. */
  readonly concurrency: number;
  readonly faults: readonly FaultKind[];
  /** A fault every this many ms, give or take half. */
  readonly faultEveryMs: number;
}

export interface RoundResult {
  readonly setup: RoundSetup;
  readonly seed: number;
  readonly history: History;
  readonly config: Partial<CheckerConfig>;
  readonly check: CheckResult;
  /** Calls made, and those that rejected (or never answered), by message. */
  readonly calls: number;
  readonly failed: ReadonlyMap<string, number>;
  /** How long the calls took past `durationMs` (the last ones in flight), and the final reads. */
  readonly drainMs: number;
  readonly sweepMs: number;
  /** The worst event-loop delay of the round's processes (ms): see `in-flight-to-reader`. */
  readonly lagMs: number;
  /** How far a worker's clock may be from the run's, measured (ms): see `clockSkewMs`. */
  readonly clockMs: number;
}

/** mulberry32: a small seeded generator, so that a seed replays the same choices. */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const now = sharedClock;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
/** A call that has not answered by then is given up (and not recorded). */
const CALL_TIMEOUT_MS = 20_000;
/** A round trip to the local Redis and back, beside the readers' event-loop delay (ms). */
const ROUND_TRIP_MS = 2;
/** The clocks' error the checker allows at least (ms), and the readings that measure it. */
const CLOCK_SKEW_MS = 1;
const CLOCK_READINGS = 20;

type HistoryWorker = Worker<HistoryCommand, HistoryReply>;
type Answer = { readonly id: number } & CallRecord;

/** Compiles the worker (incrementally); errors in files other than the run's are others' work. */
export function compileWorker(): string {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', 'test/fuzz/history.tsconfig.json'], {
    cwd: root,
    encoding: 'utf8',
  });
  const own = build.stdout.split('\n').filter((line) => line.startsWith('test/fuzz/history'));
  if (own.length > 0 || !existsSync(`${root}${WORKER}`)) {
    throw new Error(`tsc failed:\n${build.stdout}`);
  }
  return `${root}${WORKER}`;
}

function pick<T>(next: () => number, items: readonly T[]): T {
  return items[Math.floor(next() * items.length)]!;
}

/** A call chosen at random: reads most often, every kind of invalidation. */
function randomCall(next: () => number): Call {
  const key = pick(next, KEYS);
  const { row, view } = keySpec(key);
  // Builds of random length: most short, some long enough for invalidations to land inside them.
  const buildMs = next() < 0.3 ? 0 : Math.floor(next() ** 2 * 150);
  const roll = next() * 100;
  if (roll < 18) return { call: 'get', key, buildMs };
  if (roll < 50) return { call: 'getOrSet', key, buildMs };
  if (roll < 62) return { call: 'cached', key: `${row}:a`, buildMs };
  if (roll < 69) return { call: 'set', key };
  if (roll < 75) return { call: 'put', key: view === 'b' ? `${row}:a` : key };
  if (roll < 83) return { call: 'delete', key };
  if (roll < 92) return { call: 'deleteByTag', tag: pick(next, TAGS) };
  if (roll < 96) return { call: 'evictKeys', row };
  return { call: 'evictTag', row };
}

/** The keys a call invalidates, and whether it bumps tags. */
function covered(call: Call): { keys: readonly string[]; tags: boolean } {
  switch (call.call) {
    case 'set':
    case 'put':
    case 'delete':
      return { keys: [call.key], tags: false };
    case 'deleteByTag':
      return { keys: keysTagged(call.tag), tags: true };
    case 'evictKeys':
      return { keys: rowKeys(call.row), tags: false };
    case 'evictTag':
      return { keys: keysTagged(rowTag(call.row)), tags: true };
    default:
      return { keys: [], tags: false };
  }
}

/**
 * The cache's Redis (faulted), the source's (never), and the worker processes. Each round opens a
 * new application context in every worker, under a namespace of its own; the previous round's
 * stays idle (closing it is no part of what is checked, and starting new processes costs seconds).
 */
export class HistoryFleet {
  private round = 0;
  private cluster: RedisCluster | undefined;

  private constructor(
    readonly redis: RedisServer,
    readonly source: RedisServer,
    private readonly admin: Redis,
    private readonly workers: readonly HistoryWorker[],
  ) {}

  static async start(count = 3): Promise<HistoryFleet> {
    const script = compileWorker();
    const [redis, source] = await Promise.all([startRedis(), startRedis()]);
    const workers = await Promise.all(
      Array.from({ length: count }, () => Worker.start<HistoryCommand, HistoryReply>({}, script)),
    );
    // One IPC listener per call in flight.
    for (const w of workers) w.process.setMaxListeners(0);
    return new HistoryFleet(redis, source, redis.client(), workers);
  }

  async stop(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.stop()));
    await Promise.all([this.redis.stop(), this.source.stop(), this.cluster?.stop()]);
  }

  /** One round: the fleet set up as `setup`, random calls and faults, and the history checked. */
  async run(setup: RoundSetup, options: RoundOptions): Promise<RoundResult> {
    const next = random(options.seed);
    const namespace = `h${++this.round}:`;
    const fleet: FleetSetup = {
      redisUrl: this.redis.url,
      sourceUrl: this.source.url,
      namespace,
      store: setup.store,
      ...(setup.cluster ? { clusterPorts: await this.clusterPorts() } : {}),
      ...(setup.l1MaxAge === undefined ? {} : { l1MaxAge: setup.l1MaxAge }),
      ...(setup.writeReplicas === undefined ? {} : { writeReplicas: setup.writeReplicas }),
    };
    await Promise.all(this.workers.map((w) => w.ask({ cmd: 'open', ...fleet })));
    const clockMs = await this.clockError();
    const operations: Operation[] = [];
    const failed = new Map<string, number>();
    let calls = 0;
    const make = async (call: Call, worker: number): Promise<void> => {
      calls++;
      const answer = await Promise.race([
        this.workers[worker]!.ask<Answer>({ cmd: 'call', ...call }),
        sleep(CALL_TIMEOUT_MS).then(() => undefined),
      ]);
      if (!answer?.ok) {
        const why =
          answer?.failure?.split('\n')[0]?.slice(0, 80) ??
          `no answer in ${CALL_TIMEOUT_MS} ms: ${JSON.stringify(call)}`;
        failed.set(why, (failed.get(why) ?? 0) + 1);
      }
      if (!answer) return;
      const timed = { process: worker, start: answer.start, end: answer.end };
      if (call.call === 'get' || call.call === 'getOrSet' || call.call === 'cached') {
        if (answer.ok) {
          operations.push({
            kind: 'read',
            call: call.call,
            key: call.key,
            value: answer.value!,
            ...timed,
          });
        }
        return;
      }
      const { row, version, wrote, ok } = answer;
      operations.push({
        kind: 'invalidation',
        call: call.call,
        ...covered(call),
        ...timed,
        ok,
        ...(row === undefined ? {} : { row }),
        ...(version === undefined ? {} : { version }),
        ...(wrote === undefined ? {} : { wrote }),
      });
    };

    const faults: Fault[] = [];
    const end = now() + options.durationMs;
    const injecting = this.inject(options, next, end, faults);
    // Its failure is thrown by the `await` below, once the calls are done, not left unhandled.
    injecting.catch(() => {});
    await Promise.all(
      Array.from({ length: options.concurrency }, async () => {
        while (now() < end) {
          await make(randomCall(next), Math.floor(next() * this.workers.length));
          if (next() < 0.5) await sleep(next() * 10);
        }
      }),
    );
    await injecting;
    const drainMs = now() - end;
    const sweepStart = now();
    // Every key read by every worker once the faults are over: what stayed behind shows.
    await sleep(200);
    await Promise.all(
      this.workers.flatMap((_, w) => KEYS.map((key) => make({ call: 'get', key, buildMs: 0 }, w))),
    );
    const sweepMs = now() - sweepStart;
    const l1MaxAgeMs: Record<number, number | undefined> = {};
    if (setup.l1MaxAge !== undefined) {
      this.workers.forEach((_, w) => (l1MaxAgeMs[w] = setup.l1MaxAge! * 1000));
    }
    const lags = await Promise.all(
      this.workers.map((w) => w.ask<{ id: number; lagMs: number }>({ cmd: 'lag' })),
    );
    const lagMs = Math.max(...lags.map((l) => l.lagMs));
    const deliveryMs = lagMs + ROUND_TRIP_MS;
    const config = {
      l1MaxAgeMs,
      ownStore: setup.store !== 'built-in',
      deliveryMs,
      clockSkewMs: Math.max(CLOCK_SKEW_MS, clockMs),
    };
    const history = { operations, faults };
    return {
      setup,
      seed: options.seed,
      history,
      config,
      check: checkHistory(history, config),
      calls,
      failed,
      drainMs,
      sweepMs,
      lagMs,
      clockMs,
    };
  }

  /**
   * How far the workers' clocks may be from the run's (ms): the worst, over the workers, of the
   * offset of the reading with the shortest round trip, plus half that round trip.
   */
  private async clockError(): Promise<number> {
    let worst = 0;
    for (const worker of this.workers) {
      let best = { trip: Infinity, error: Infinity };
      for (let i = 0; i < CLOCK_READINGS; i++) {
        const sent = now();
        const { clock } = await worker.ask<{ id: number; clock: number }>({ cmd: 'clock' });
        const back = now();
        const trip = back - sent;
        if (trip < best.trip)
          best = { trip, error: Math.abs(clock - (sent + back) / 2) + trip / 2 };
      }
      worst = Math.max(worst, best.error);
    }
    return worst;
  }

  /** Faults, one at a time, until `end`; each recorded from its injection to its repair. */
  private async inject(
    options: RoundOptions,
    next: () => number,
    end: number,
    faults: Fault[],
  ): Promise<void> {
    if (options.faults.length === 0) return;
    for (;;) {
      await sleep(options.faultEveryMs * (0.5 + next()));
      if (now() >= end) return;
      const kind = pick(next, options.faults);
      const start = now();
      await this.fault(kind, next);
      faults.push({ kind, start, end: now() });
    }
  }

  private async clusterPorts(): Promise<number[]> {
    this.cluster ??= await startRedisCluster({ replicas: 1, nodeTimeoutMs: 1000 });
    return this.cluster.nodes.map((n) => n.port);
  }

  /**
   * Kills the master of the slot of the cache's channel and tag versions, waits for its replica's
   * promotion, and starts it again (it rejoins as a replica), synced before the next failover.
   */
  private async failover(): Promise<void> {
    const cluster = this.cluster!;
    // A killed node's plain client would queue a command until it is back: asked only when up.
    const up = (i: number): boolean => {
      const child = cluster.nodes[i]!.process;
      return child.exitCode === null && child.signalCode === null;
    };
    const alive = cluster.nodes.filter((_, i) => up(i));
    const slot = Number(
      await cluster
        .node(cluster.nodes.indexOf(alive[0]!))
        .cluster('KEYSLOT', '{nestjs-buffer-lock}'),
    );
    const ownerOf = async (): Promise<number | undefined> => {
      for (let i = 0; i < cluster.nodes.length; i++) {
        if (!up(i)) continue;
        const nodes = await cluster
          .node(i)
          .cluster('NODES')
          .catch(() => undefined);
        if (nodes === undefined) continue;
        for (const line of String(nodes).split('\n')) {
          const [, address, flags, , , , , state, ...slots] = line.split(' ');
          if (!/master/.test(flags ?? '') || /fail/.test(flags ?? '') || state !== 'connected')
            continue;
          const owns = slots.some((range) => {
            const [from, to = from] = range.split('-').map(Number);
            return from! <= slot && slot <= to!;
          });
          if (owns) return cluster.nodes.findIndex((n) => address?.includes(`:${n.port}@`));
        }
        return undefined;
      }
      return undefined;
    };
    const master = await ownerOf();
    if (master === undefined || master < 0) return;
    await cluster.nodes[master]!.kill();
    for (let i = 0; i < 200; i++) {
      const owner = await ownerOf();
      if (owner !== undefined && owner !== master) break;
      await sleep(100);
    }
    await cluster.nodes[master]!.restart();
    for (let i = 0; i < 200; i++) {
      const info = String(
        await cluster
          .node(master)
          .info('replication')
          .catch(() => ''),
      );
      if (/master_link_status:up/.test(info)) return;
      await sleep(100);
    }
  }

  private async fault(kind: FaultKind, next: () => number): Promise<void> {
    const { admin, redis } = this;
    switch (kind) {
      case 'failover':
        await this.failover();
        return;
      case 'pubsub-kill':
        await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub');
        return;
      case 'pause':
        redis.pause();
        await sleep(150 + next() * 500);
        redis.resume();
        return;
      case 'restart':
        await redis.restart();
        return;
      case 'flushall':
        await admin.flushall();
        return;
      case 'maxmemory': {
        // Memory just above what is used, least recently used keys evicted to make room for filler.
        const info = String(await admin.info('memory'));
        const used = Number(/used_memory:(\d+)/.exec(info)?.[1] ?? 0);
        await admin.config('SET', 'maxmemory-policy', 'allkeys-lru');
        await admin.config('SET', 'maxmemory', String(used + 256 * 1024));
        const filler = 'x'.repeat(16 * 1024);
        try {
          // Redis refuses a write (OOM) when eviction cannot make room: memory is short enough.
          for (let i = 0; i < 48; i++) await admin.set(`filler:${i}`, filler);
        } catch (error) {
          if (!(error as Error).message.startsWith('OOM')) throw error;
        } finally {
          await admin.config('SET', 'maxmemory', '0');
        }
        await admin.del(...Array.from({ length: 48 }, (_, i) => `filler:${i}`));
        return;
      }
    }
  }
}
