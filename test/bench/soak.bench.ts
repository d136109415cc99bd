import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Redis } from 'ioredis';
import {
  BufferCache,
  BufferLockModule,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
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

/**
 * A long run of mixed load with faults: several Nest application contexts in this process (one
 * per "worker", each with its own module, clients and engine) call `@SingleFlight` methods (wait,
 * skip, throw, share, onRedisError 'throw') and `BufferCache.getOrSet` over a small set of keys,
 * while the section's own redis-server is frozen (SIGSTOP/SIGCONT), killed and restarted, or has
 * its client connections killed, at random. At the end everything must be as it was: connections,
 * timers and handles, listeners, heap.
 */

const WORKERS = 3;
const CALLERS_PER_WORKER = 8;
const KEYS = 12;
/** Seconds a cache entry stays fresh: the builds one key needs are one per this period. */
const CACHE_TTL = 3;
/** A call that takes longer than this is counted as hung (every call has a bound far below). */
const CALL_LIMIT_MS = 30_000;
/**
 * Builds that start this soon after a fault ended are counted as the fault's: a breaker opened at
 * its end stays open for openSeconds (2 s), and calls run without the lock meanwhile.
 */
const FAULT_SHADOW_MS = 5000;

/** What the load saw, across all workers. */
class Tally {
  readonly flightBuilds = new Map<string, number>();
  readonly cacheBuilds = new Map<string, number>();
  readonly failures = new Map<string, number>();
  readonly outcomes = new Map<string, number>();
  /** Flight builds of a key that started while another build of it ran (in any worker). */
  overlaps = 0;
  overlapsNearFault = 0;
  /** Cache builds of a key whose last entry should still have been fresh. */
  extraCacheBuilds = 0;
  extraCacheBuildsNearFault = 0;
  calls = 0;
  hung = 0;
  private readonly running = new Map<string, number>();
  private readonly lastCacheBuild = new Map<string, number>();

  constructor(private readonly nearFault: (at: number) => boolean) {}

  /** One build of a `@SingleFlight` method; `key` is the method's own (`skip:k3`). */
  async flight(key: string): Promise<number> {
    const at = Date.now();
    if ((this.running.get(key) ?? 0) > 0) {
      this.overlaps++;
      if (this.nearFault(at)) this.overlapsNearFault++;
    }
    this.running.set(key, (this.running.get(key) ?? 0) + 1);
    try {
      await sleep(5 + Math.random() * 20);
      bump(this.flightBuilds, key.slice(key.indexOf(':') + 1));
      return at;
    } finally {
      this.running.set(key, this.running.get(key)! - 1);
    }
  }

  async cache(key: string): Promise<{ key: string; at: number }> {
    const at = Date.now();
    const last = this.lastCacheBuild.get(key);
    if (last !== undefined && at < last + CACHE_TTL * 1000 - 50) {
      this.extraCacheBuilds++;
      if (this.nearFault(at)) this.extraCacheBuildsNearFault++;
    }
    await sleep(5 + Math.random() * 15);
    bump(this.cacheBuilds, key);
    this.lastCacheBuild.set(key, Date.now());
    return { key, at };
  }
}

const bump = (map: Map<string, number>, key: string, by = 1): void =>
  void map.set(key, (map.get(key) ?? 0) + by);

let tally: Tally;

@Injectable()
class SoakWork {
  constructor(readonly cache: BufferCache) {}

  @SingleFlight((key: string) => key)
  async waitFor(key: string): Promise<number> {
    return tally.flight(key);
  }

  @SingleFlight((key: string) => key, { onBusy: 'skip' })
  async skipIfBusy(key: string): Promise<number | undefined> {
    return tally.flight(key);
  }

  @SingleFlight((key: string) => key, { onBusy: 'throw' })
  async throwIfBusy(key: string): Promise<number> {
    return tally.flight(key);
  }

  @SingleFlight((key: string) => key, { share: true })
  async shared(key: string): Promise<number> {
    return tally.flight(key);
  }

  @SingleFlight((key: string) => key, { onRedisError: 'throw' })
  async strict(key: string): Promise<number> {
    return tally.flight(key);
  }

  cached(key: string): Promise<{ key: string; at: number }> {
    return this.cache.getOrSet(key, () => tally.cache(key), { ttl: CACHE_TTL });
  }
}

const OPERATIONS = ['waitFor', 'skipIfBusy', 'throwIfBusy', 'shared', 'strict', 'cached'] as const;

const silent = { log() {}, warn() {}, error() {} };

async function startWorker(redis: RedisServer): Promise<INestApplicationContext> {
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const SoakApp = class {};
  Module({
    imports: [
      BufferLockModule.forRoot({
        redis: redis.url,
        namespace: 'bench:soak:',
        ttl: 5,
        lockTimeout: 2,
        logger: silent,
        circuitBreaker: { failureThreshold: 5, openSeconds: 2, probes: 1 },
      }),
    ],
    providers: [SoakWork],
  })(SoakApp);
  return NestFactory.createApplicationContext(SoakApp, { logger: false });
}

/** Counts of `process.getActiveResourcesInfo()` by kind (Timeout, TCPSocketWrap, …). */
function resources(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const kind of process.getActiveResourcesInfo()) bump(counts, kind);
  return counts;
}

const describeCounts = (counts: ReadonlyMap<string, number>): string =>
  [...counts]
    .toSorted(([a], [b]) => a.localeCompare(b))
    .map(([kind, n]) => `${kind}:${n}`)
    .join(' ') || 'none';

/** Every listener on an emitter, all events together. */
const listenersOf = (emitter: NodeJS.EventEmitter): number =>
  emitter.eventNames().reduce((n, event) => n + emitter.listenerCount(event), 0);

/** Listeners on each worker's lock client, engine and cache, in that order. */
async function listeners(apps: readonly INestApplicationContext[]): Promise<number[]> {
  const counts: number[] = [];
  for (const app of apps) {
    const client = (await app.get(RedisLockService).getClient()) as unknown as Redis;
    counts.push(
      listenersOf(client),
      listenersOf(app.get(SingleFlightEngine)),
      listenersOf(app.get(BufferCache)),
    );
  }
  return counts;
}

/** Connections the server has now (CLIENT LIST), or NaN while it does not answer. */
async function connections(admin: Redis): Promise<number> {
  try {
    return String(await admin.client('LIST'))
      .trim()
      .split('\n').length;
  } catch {
    return Number.NaN;
  }
}

/** Polls until `check` holds or `ms` passed; resolves whether it held. */
async function until(check: () => Promise<boolean> | boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await sleep(100);
  }
}

const heapUsed = (): number => {
  collectGarbage(4);
  return process.memoryUsage().heapUsed;
};

type Fault = 'pause' | 'kill' | 'disconnect';
const FAULTS: readonly Fault[] = ['pause', 'kill', 'disconnect'];
const pick = <T>(items: readonly T[]): T => items[Math.floor(Math.random() * items.length)]!;
const between = (min: number, max: number): number => min + Math.random() * (max - min);

export const soakSection: BenchSection = {
  id: 'soak',
  title: '8. Soak',
  optIn: true,
  async run({ quick, report, soakMinutes }: BenchContext) {
    const minutes = soakMinutes ?? (quick ? 0.5 : 10);
    const durationMs = minutes * 60_000;
    // Its own server: this section freezes, kills and restarts it.
    const redis = await startRedis();
    const admin = redis.client();
    const faults: { kind: Fault; start: number; end: number }[] = [];
    const nearFault = (at: number): boolean =>
      faults.some((f) => at >= f.start && at <= f.end + FAULT_SHADOW_MS);
    tally = new Tally(nearFault);
    let apps: INestApplicationContext[] = [];
    try {
      const before = { connections: await connections(admin), resources: resources() };
      apps = await Promise.all(Array.from({ length: WORKERS }, () => startWorker(redis)));
      const works = apps.map((app) => app.get(SoakWork));

      const call = async (work: SoakWork): Promise<void> => {
        const operation = pick(OPERATIONS);
        // Each method has keys of its own: in a process, a call joins a flight of its key in
        // progress and gets that flight's outcome, whatever its own onBusy says.
        const key = `${operation}:k${Math.floor(Math.random() * KEYS)}`;
        let timer: NodeJS.Timeout | undefined;
        const limit = new Promise<'hung'>(
          (r) => (timer = setTimeout(() => r('hung'), CALL_LIMIT_MS)),
        );
        tally.calls++;
        try {
          const result = await Promise.race([work[operation](key), limit]);
          if (result === 'hung') tally.hung++;
          else
            bump(
              tally.outcomes,
              result === undefined ? `${operation}: skipped` : `${operation}: value`,
            );
        } catch (error) {
          const code = (error as { code?: unknown }).code;
          bump(tally.failures, `${operation}: ${typeof code === 'string' ? code : String(error)}`);
        } finally {
          clearTimeout(timer);
        }
      };
      /** Starts the callers of every worker; the function it returns stops them. */
      const startLoad = (): (() => Promise<void>) => {
        const state = { stopped: false };
        const caller = async (work: SoakWork): Promise<void> => {
          while (!state.stopped) {
            await call(work);
            await sleep(Math.random() * 5);
          }
        };
        const callers = works.flatMap((work) =>
          Array.from({ length: CALLERS_PER_WORKER }, () => caller(work)),
        );
        return async () => {
          state.stopped = true;
          await Promise.all(callers);
        };
      };
      const stopLoad = startLoad();

      // Warm-up: connections made, subscribers up, JIT done; the baselines are taken after it.
      report.progress(`soak: warm-up, then ${minutes} min of load with faults`);
      await sleep(quick ? 2000 : 5000);
      const warm = {
        connections: await connections(admin),
        listeners: await listeners(apps),
        heap: heapUsed(),
      };
      const started = Date.now();

      while (Date.now() - started < durationMs) {
        await sleep(
          Math.min(between(4000, 12_000), Math.max(0, durationMs - (Date.now() - started))),
        );
        if (Date.now() - started >= durationMs) break;
        const kind = pick(FAULTS);
        const fault = { kind, start: Date.now(), end: Number.POSITIVE_INFINITY };
        faults.push(fault);
        report.progress(`soak: ${kind} at ${((fault.start - started) / 1000).toFixed(0)} s`);
        if (kind === 'pause') {
          redis.pause();
          await sleep(between(1000, 3000));
          redis.resume();
        } else if (kind === 'kill') {
          await redis.kill();
          await sleep(between(200, 1000));
          await redis.restart();
        } else {
          // Every client connection of the workers, and their subscriber connections too.
          await admin.call('CLIENT', 'KILL', 'TYPE', 'normal').catch(() => 0);
          await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub').catch(() => 0);
        }
        fault.end = Date.now();
      }
      await stopLoad();
      const loadSeconds = (Date.now() - started) / 1000;

      // After the last fault: reconnected, breakers closed, the connections back to their number.
      report.progress('soak: load stopped, waiting for the workers to settle');
      const engines = apps.map((app) => app.get(SingleFlightEngine));
      // A breaker left half-open closes on its next call's success: each worker makes calls.
      const breakersClosed = await until(async () => {
        await Promise.all(works.map((work) => work.waitFor('settle:k0').catch(() => undefined)));
        return engines.every((e) => (e.breaker?.state ?? 'closed') === 'closed');
      }, 20_000);
      // The same load once more, as long as the warm-up: as many connections as then (each
      // worker's client and its wake-up subscriber), none left over from the faults.
      const stopAgain = startLoad();
      const connectionsBack = await until(
        async () => (await connections(admin)) === warm.connections,
        quick ? 2000 : 5000,
      );
      const endConnections = await connections(admin);
      await stopAgain();
      const end = {
        connections: endConnections,
        listeners: await listeners(apps),
        heap: heapUsed(),
      };
      await Promise.all(apps.map((app) => app.close()));
      apps = [];
      const closedClean = await until(
        async () =>
          (await connections(admin)) === before.connections &&
          [...resources()].every(([kind, n]) => n <= (before.resources.get(kind) ?? 0)),
        10_000,
      );
      const after = {
        connections: await connections(admin),
        resources: resources(),
        heap: heapUsed(),
      };

      const flightBuilds = [...tally.flightBuilds.values()].reduce((a, b) => a + b, 0);
      const cacheBuilds = [...tally.cacheBuilds.values()].reduce((a, b) => a + b, 0);
      const periods = Math.ceil(loadSeconds / CACHE_TTL) + 1;
      const heapGrowth = end.heap - warm.heap;
      const heapLimit = Math.max(5 * 1024 * 1024, warm.heap * 0.1);
      const sameListeners = end.listeners.every((n, i) => n === warm.listeners[i]);
      const resourcesBack = [...after.resources].every(
        ([kind, n]) => n <= (before.resources.get(kind) ?? 0),
      );
      const calmOverlaps = tally.overlaps - tally.overlapsNearFault;
      const calmExtra = tally.extraCacheBuilds - tally.extraCacheBuildsNearFault;
      const rows: [string, string, string, boolean][] = [
        ['calls that hung (no answer in 30 s)', '0', fmtInt(tally.hung), tally.hung === 0],
        [
          'overlapping @SingleFlight builds away from faults',
          '0',
          fmtInt(calmOverlaps),
          calmOverlaps === 0,
        ],
        [
          'getOrSet builds of a fresh entry away from faults',
          '0',
          fmtInt(calmExtra),
          calmExtra === 0,
        ],
        [
          'breakers closed after the last fault',
          'closed',
          breakersClosed ? 'closed' : 'not closed in 20 s',
          breakersClosed,
        ],
        [
          'connections (CLIENT LIST) under load, workers up',
          fmtInt(warm.connections),
          fmtInt(end.connections),
          connectionsBack && end.connections === warm.connections,
        ],
        [
          'listeners on each worker’s client, engine, cache',
          warm.listeners.join(' '),
          end.listeners.join(' '),
          sameListeners,
        ],
        [
          `heap used after GC, workers up (growth ≤ ${fmtMb(heapLimit)})`,
          fmtMb(warm.heap),
          fmtMb(end.heap),
          heapGrowth <= heapLimit,
        ],
        [
          'connections (CLIENT LIST) after app.close()',
          fmtInt(before.connections),
          fmtInt(after.connections),
          after.connections === before.connections,
        ],
        [
          'active handles and timers after app.close()',
          describeCounts(before.resources),
          describeCounts(after.resources),
          closedClean && resourcesBack,
        ],
      ];
      const faultCounts = new Map<string, number>();
      for (const f of faults) bump(faultCounts, f.kind);
      const perKey = (map: ReadonlyMap<string, number>, prefix = ''): string =>
        Array.from({ length: KEYS }, (_, i) => map.get(`${prefix}k${i}`) ?? 0).join(' ');
      report.add(
        `## 8. Soak\n\n` +
          `${WORKERS} Nest application contexts in one process (each its own \`BufferLockModule\`, ` +
          `clients and engine), ${CALLERS_PER_WORKER} callers each, over ${KEYS} keys: ` +
          `\`@SingleFlight\` with onBusy wait, skip and throw, share: true, onRedisError: 'throw', ` +
          `and \`BufferCache.getOrSet\` (ttl ${CACHE_TTL} s). ${loadSeconds.toFixed(0)} s of load, ` +
          `${fmtInt(tally.calls)} calls; faults at random every 4–12 s on the section's own ` +
          `redis-server: ${describeCounts(faultCounts)} (pause: SIGSTOP for 1–3 s; kill: SIGKILL, ` +
          `restart after 0.2–1 s; disconnect: CLIENT KILL of every normal and pub/sub client). ` +
          `Heap after GC is read after the warm-up and after the load, with the workers up; the ` +
          `last lines after every worker was closed. Heap after close: ${fmtMb(after.heap)}.\n\n` +
          table(
            ['builds', 'count', 'per key', 'extra', 'of which within 5 s of a fault'],
            [
              [
                '@SingleFlight, 5 methods (one at a time per key)',
                fmtInt(flightBuilds),
                perKey(tally.flightBuilds),
                `${fmtInt(tally.overlaps)} overlapping`,
                fmtInt(tally.overlapsNearFault),
              ],
              [
                `getOrSet (one per key per ${CACHE_TTL} s, about ${periods} each)`,
                fmtInt(cacheBuilds),
                perKey(tally.cacheBuilds, 'cached:'),
                `${fmtInt(tally.extraCacheBuilds)} while fresh`,
                fmtInt(tally.extraCacheBuildsNearFault),
              ],
            ],
          ) +
          `\n` +
          table(
            ['call outcome', 'calls'],
            [
              ...[...tally.outcomes].toSorted(([a], [b]) => a.localeCompare(b)),
              ...[...tally.failures]
                .toSorted(([a], [b]) => a.localeCompare(b))
                .map(([what, n]): [string, number] => [`failed: ${what}`, n]),
            ].map(([what, n]) => [what, fmtInt(n)]),
          ) +
          `\n` +
          table(
            ['after the soak', 'baseline', 'end', 'result'],
            rows.map(([what, base, now, ok]) => [what, base, now, ok ? 'PASS' : 'FAIL']),
          ),
      );
      for (const [what, , now, ok] of rows) target(`soak: ${what}`, now, ok);
    } finally {
      redis.resume();
      await Promise.all(apps.map((app) => app.close().catch(() => undefined)));
      admin.disconnect();
      await redis.stop();
    }
  },
};
