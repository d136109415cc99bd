import { fork, type ChildProcess } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { createCache } from 'cache-manager';
import type { Redis } from 'ioredis';
import { BufferCache, RedisLockService } from '../../lib/index.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
} from '../../lib/single-flight/release-subscriber.js';
import {
  collectGarbage,
  commandDelta,
  commandStats,
  describeCommands,
  epochMs,
  fmt,
  fmtInt,
  fmtRatio,
  interleave,
  mailbox,
  median,
  monitorCommands,
  percentile,
  sleep,
  summarize,
  table,
  target,
  type BenchContext,
  type BenchSection,
  type CommandDelta,
  type MonitoredCommands,
} from './harness.js';
import { MISS, type FromL1Worker, type Reads, type ToL1Worker } from './l1.protocol.js';
import { cacheHit, type CacheHit, type HitRow } from './cache-hit.js';
import { medianInterval } from './lock.bench.js';

const silent = { log() {}, warn() {}, error() {} };
const HOT = 'hot';
/** The hot key's value: a small record, as a cached row or DTO would be. */
const VALUE = { id: 42, name: 'hot key', tags: ['a', 'b', 'c'], price: 9.99 };
const build = (): typeof VALUE => ({ ...VALUE, tags: [...VALUE.tags] });
/** How long the calls of one timing take: long enough for the clock, short enough for many. */
const BATCH_MS = 2;
/** The l1 of the hot-hit case: the module's defaults. */
const HOT_L1 = { maxEntries: 10_000, maxAge: 5 };
/** The faults' maxAge (seconds): small, so that the bound it sets shows within the run. */
const FAULT_MAX_AGE = 1;

// ---------------------------------------------------------------------------------------------
// 1. The hot hit, in this process.

interface Contender {
  readonly label: string;
  readonly call: () => Promise<unknown>;
  /** Commands its Redis client sent so far (its subscriber aside); none for a memory store. */
  readonly sent: () => number;
  /** Whether its hits are served in this process (warmed until a call sends nothing). */
  readonly inProcess: boolean;
  readonly close: () => Promise<unknown>;
}

/** Counts the commands a client sends (a subscriber is a duplicate of its own: not counted). */
function counted(client: Redis): () => number {
  let sent = 0;
  const sendCommand = client.sendCommand.bind(client);
  client.sendCommand = ((...args: Parameters<typeof sendCommand>) => {
    sent++;
    return sendCommand(...args);
  }) as typeof sendCommand;
  return () => sent;
}

/** Calls until one sends nothing to Redis: the tier subscribes on first use, then keeps copies. */
async function warm(contender: Contender): Promise<void> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const before = contender.sent();
    await contender.call();
    if (contender.sent() === before) return;
    await sleep(5);
  }
  throw new Error(`${contender.label}: every call still reaches Redis after 5 s`);
}

async function ours(context: BenchContext): Promise<Contender> {
  const client = context.redis.client();
  const sent = counted(client);
  const lock = new RedisLockService({ redis: client, namespace: 'bench:l1:' });
  const cache = new BufferCache({
    lock,
    options: { logger: silent, cachePrefix: 'bench:l1:hot:', l1: HOT_L1 },
  });
  return {
    label: `BufferCache.getOrSet, l1 (maxAge ${HOT_L1.maxAge} s) + Redis`,
    call: () => cache.getOrSet(HOT, build, { ttl: 3600 }),
    sent,
    inProcess: true,
    async close() {
      // The tier's subscriber, a duplicate of the client: it would outlive the client.
      releaseSubscriberFor(client as unknown as DuplicableClient).close();
      client.disconnect();
    },
  };
}

/** bentocache with its memory L1, Redis L2 on ioredis, and its Redis bus for invalidations. */
async function bentocache(context: BenchContext, serialize: boolean): Promise<Contender> {
  const { BentoCache, bentostore } = await import('bentocache');
  const { memoryDriver } = await import('bentocache/drivers/memory');
  const { redisBusDriver, redisDriver } = await import('bentocache/drivers/redis');
  const connection = context.redis.client();
  const sent = counted(connection);
  const bento = new BentoCache({
    default: 'hot',
    stores: {
      hot: bentostore()
        .useL1Layer(memoryDriver({ maxItems: 10_000, serialize }))
        .useL2Layer(redisDriver({ connection, prefix: `bench-l1-bento-${serialize}` }))
        .useBus(redisBusDriver({ connection: { host: '127.0.0.1', port: context.redis.port } })),
    },
  });
  const layer = serialize ? 'memory L1' : 'memory L1 (serialize: false)';
  return {
    label: `bentocache getOrSet, ${layer} + Redis L2 + bus`,
    call: () => bento.getOrSet({ key: HOT, factory: build, ttl: '1h' }),
    sent,
    inProcess: true,
    async close() {
      await bento.disconnectAll();
      connection.disconnect();
    },
  };
}

/** cache-manager 7 with its default store: a Keyv in memory, nothing shared between processes. */
function cacheManager(): Contender {
  const cache = createCache();
  return {
    label: 'cache-manager wrap(), default Keyv in-memory store',
    call: () => cache.wrap(HOT, build, 3_600_000),
    sent: () => 0,
    inProcess: true,
    close: () => cache.disconnect(),
  };
}

/** What a hand-written cache does without a local tier: a GET per call, a SET on a miss. */
function getAside(context: BenchContext): Contender {
  const client = context.redis.client();
  const key = 'bench:l1:aside:hot';
  return {
    label: 'cache-aside by hand: ioredis GET (SET on a miss)',
    async call() {
      const text = await client.get(key);
      if (text !== null) return JSON.parse(text) as unknown;
      const value = build();
      await client.set(key, JSON.stringify(value), 'EX', 3600);
      return value;
    },
    sent: counted(client),
    inProcess: false,
    async close() {
      client.disconnect();
    },
  };
}

interface Timing {
  /** ns per call of each batch of calls. */
  readonly batches: number[];
  calls: number;
  ms: number;
  commands: number;
}

/** Sequential calls for `ms`, timed per batch of `batch` calls. */
async function timed(contender: Contender, batch: number, ms: number, into: Timing): Promise<void> {
  const { call } = contender;
  const sentBefore = contender.sent();
  const end = performance.now() + ms;
  while (performance.now() < end) {
    const started = performance.now();
    for (let i = 0; i < batch; i++) await call();
    const took = performance.now() - started;
    into.batches.push((took * 1e6) / batch);
    into.calls += batch;
    into.ms += took;
  }
  into.commands += contender.sent() - sentBefore;
}

async function hotHit(context: BenchContext): Promise<void> {
  const { quick, report } = context;
  const rounds = quick ? 1 : 5;
  const runMs = quick ? 150 : 700;
  const contenders: Contender[] = [await ours(context)];
  const unavailable: string[][] = [];
  for (const serialize of [true, false]) {
    try {
      contenders.push(await bentocache(context, serialize));
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      unavailable.push([`bentocache (serialize: ${serialize})`, `failed to start: ${text}`]);
    }
  }
  contenders.push(cacheManager(), getAside(context));
  const timings = new Map<Contender, Timing>();
  const batches = new Map<Contender, number>();
  try {
    for (const contender of contenders) {
      if (contender.inProcess) await warm(contender);
      // A batch of about BATCH_MS: a Redis round trip is ~100× an in-memory hit.
      const started = performance.now();
      for (let i = 0; i < 200; i++) await contender.call();
      const perCall = (performance.now() - started) / 200;
      batches.set(contender, Math.min(10_000, Math.max(1, Math.round(BATCH_MS / perCall))));
      timings.set(contender, { batches: [], calls: 0, ms: 0, commands: 0 });
    }
    const scratch: Timing = { batches: [], calls: 0, ms: 0, commands: 0 };
    await interleave(
      contenders,
      rounds,
      1,
      async (contender, round) => {
        report.progress(`l1 hot hit: ${contender.label}, round ${round + 1}/${rounds}`);
        // Garbage of the one before is not this one's to collect.
        collectGarbage();
        const into = round < 0 ? scratch : timings.get(contender)!;
        await timed(contender, batches.get(contender)!, round < 0 ? runMs / 3 : runMs, into);
      },
      () => {},
    );
  } finally {
    await Promise.allSettled(contenders.map((contender) => contender.close()));
  }
  const nsPerCall = (t: Timing): number => (t.ms * 1e6) / t.calls;
  const ourNs = nsPerCall(timings.get(contenders[0]!)!);
  const rows = contenders.map((contender) => {
    const t = timings.get(contender)!;
    const { p50, p99 } = summarize(t.batches);
    return [
      contender.label,
      fmtInt(nsPerCall(t)),
      fmtInt(p50),
      fmtInt(p99),
      fmtInt((t.calls * 1000) / t.ms),
      fmtRatio(nsPerCall(t) / ourNs),
      fmt((1000 * t.commands) / t.calls, 2),
    ];
  });
  report.add(
    `### Hot hit: one key, sequential calls in this process\n\n` +
      `One key already cached, read by one loop of \`await\`ed calls for ${rounds} × ` +
      `${runMs} ms per contender (rounds interleaved, a forced GC before each, a round of ` +
      `warm-up first), timed per batch of calls (about ${BATCH_MS} ms each). p50 and p99 are of ` +
      `the batches' ns per call; "vs ours" is the time per call over ours (above 1: slower). ` +
      `BufferCache and bentocache were read until a call sent nothing to Redis before the ` +
      `timing. The value is a small object; BufferCache and bentocache with ` +
      `\`serialize: false\` return the copy they hold, bentocache by default parses its ` +
      `serialized copy on every hit, the GET decodes JSON per call. BufferCache passes ` +
      `\`{ ttl: 3600 }\` as a literal each call, as code would. The last column counts the ` +
      `commands sent on each one's command client (not its subscriber).\n\n` +
      table(
        [
          'contender',
          'ns per call',
          'p50 ns',
          'p99 ns',
          'ops/s',
          'vs ours',
          'Redis commands per 1000 calls',
        ],
        [...rows, ...unavailable.map(([label, text]) => [label!, text!, '', '', '', '', ''])],
      ),
  );
  const opsOf = (contender: Contender): number => {
    const t = timings.get(contender)!;
    return (t.calls * 1000) / t.ms;
  };
  const bento = contenders.filter((contender) => contender.label.startsWith('bentocache'));
  const bestBento = bento.toSorted((a, b) => opsOf(b) - opsOf(a))[0];
  target(
    'l1 hot hit: ops/s ≥ bentocache (memory L1 + Redis L2 + bus; the faster of its two rows)',
    bestBento
      ? `${fmtInt(opsOf(contenders[0]!))} vs ${fmtInt(opsOf(bestBento))} ops/s`
      : 'bentocache did not start',
    bestBento ? opsOf(contenders[0]!) >= opsOf(bestBento) : undefined,
  );
  const aside = contenders.at(-1)!;
  const times = nsPerCall(timings.get(aside)!) / ourNs;
  target(
    'l1 hot hit: ≥ 20× faster per call than a Redis GET cache-aside',
    fmtRatio(times),
    times >= 20,
  );
}

/** Hits timed on both builds with `--baseline`: l1's two forms, and a hit on the store. */
const AGAINST_BASELINE: readonly HitRow[] = [
  'BufferCache hit, l1',
  '@Cached hit, l1',
  'BufferCache hit',
];

/** Calls per second of `hit`, `ms` of sequential calls in batches of `batch`. */
async function opsPerSecond(hit: CacheHit, batch: number, ms: number): Promise<number> {
  collectGarbage();
  const into: Timing = { batches: [], calls: 0, ms: 0, commands: 0 };
  await timed(
    { label: '', call: hit.call, sent: () => 0, inProcess: true, close: hit.close },
    batch,
    ms,
    into,
  );
  return (into.calls * 1000) / into.ms;
}

/**
 * With `--baseline`: the hot hit of this build and of the baseline's, both through a Nest
 * application context (cache-hit.ts), one after the other in every round, in turn first.
 */
async function hotHitAgainstBaseline(context: BenchContext): Promise<void> {
  const { quick, redis, report, baseline } = context;
  if (!baseline) return;
  const rounds = context.rounds ?? (quick ? 1 : 15);
  const runMs = quick ? 100 : 400;
  const warmCalls = quick ? 500 : 20_000;
  interface Pair {
    readonly row: HitRow;
    readonly mine: CacheHit;
    readonly theirs: CacheHit;
    readonly batch: number;
    readonly ops: { mine: number[]; theirs: number[] };
  }
  const pairs: Pair[] = [];
  try {
    for (const row of AGAINST_BASELINE) {
      const mine = await cacheHit(row, redis.port);
      const theirs = await cacheHit(row, redis.port, baseline.entry);
      // Uncounted: the JIT's work; then batches of about BATCH_MS (of this build's calls).
      for (const hit of [mine, theirs]) for (let i = 0; i < warmCalls; i++) await hit.call();
      const started = performance.now();
      for (let i = 0; i < 200; i++) await mine.call();
      const batch = Math.max(1, Math.round(BATCH_MS / ((performance.now() - started) / 200)));
      pairs.push({ row, mine, theirs, batch, ops: { mine: [], theirs: [] } });
    }
    await interleave(
      pairs,
      rounds,
      1,
      async (pair, round) => {
        report.progress(
          `l1 hot hit against ${baseline.ref}: ${pair.row}, round ${round + 1}/${rounds}`,
        );
        const mineFirst = round % 2 === 0;
        const first = await opsPerSecond(mineFirst ? pair.mine : pair.theirs, pair.batch, runMs);
        const second = await opsPerSecond(mineFirst ? pair.theirs : pair.mine, pair.batch, runMs);
        return mineFirst ? { mine: first, theirs: second } : { mine: second, theirs: first };
      },
      (pair, { mine, theirs }) => {
        pair.ops.mine.push(mine);
        pair.ops.theirs.push(theirs);
      },
    );
  } finally {
    await Promise.allSettled(pairs.flatMap((pair) => [pair.mine.close(), pair.theirs.close()]));
  }
  const rows = pairs.map(({ row, ops }) => {
    const quotients = ops.mine.map((o, i) => o / ops.theirs[i]!).toSorted((a, b) => a - b);
    const interval = medianInterval(quotients);
    const ratio = median(quotients);
    target(
      `hot hit, ${row}: calls/s ≥ 0.98× ${baseline.ref} (round by round)`,
      `${fmt(ratio, 3)}× (95 % confidence ${interval ? interval.map((q) => fmt(q, 3)).join('–') : '–'})`,
      ratio >= 0.98,
    );
    return [
      row,
      fmtInt(median(ops.mine)),
      fmtInt(median(ops.theirs)),
      `${fmt(ratio, 3)}×`,
      interval ? interval.map((q) => fmt(q, 3)).join('–') : 'needs 6 rounds or more',
      `${fmt(percentile(quotients, 25), 3)}–${fmt(percentile(quotients, 75), 3)}`,
      `${quotients.filter((q) => q >= 1).length} of ${quotients.length}`,
    ];
  });
  report.add(
    `### Hot hit against ${baseline.ref}\n\n` +
      `The same hit on this build and on the library built from commit ${baseline.commit} ` +
      `(\`--baseline=${baseline.ref}\`), in this process: a Nest application context of each ` +
      `build with BufferLockModule on the built-in store (\`l1: { maxAge: 3600 }\` in the l1 ` +
      `rows), one key written once and read by one loop of \`await\`ed calls, ` +
      `\`BufferCache.getOrSet(key, build, { ttl })\` or a \`@Cached(key, { ttl })\` method. ` +
      `${rounds} round(s) after one of warm-up; in each, both builds run ${runMs} ms one after ` +
      `the other (a forced GC before each), the first in turn this build and the baseline, ` +
      `and the round's ratio is this build's calls/s over the baseline's. The table gives the ` +
      `median ratio, a 95 % confidence interval of it (sign test), the middle half of the ` +
      `rounds' ratios, and how many rounds this build was as fast or faster.\n\n` +
      table(
        [
          'call',
          'calls/s, this build',
          `calls/s at ${baseline.ref}`,
          'this build over it',
          '95 % confidence',
          'middle half',
          'rounds ≥ 1.00×',
        ],
        rows,
      ),
  );
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. Three worker processes: one writes, two read.

interface Worker {
  readonly process: ChildProcess;
  send(message: ToL1Worker): void;
  next<T extends FromL1Worker['type']>(type: T): Promise<Extract<FromL1Worker, { type: T }>>;
  /** Sends `message`, then waits for the answer of type `type`. */
  ask<T extends FromL1Worker['type']>(
    message: ToL1Worker,
    type: T,
  ): Promise<Extract<FromL1Worker, { type: T }>>;
}

function startWorker(port: number): Worker {
  const child = fork(fileURLToPath(new URL('./l1.worker.js', import.meta.url)), [], {
    env: { ...process.env, BENCH_REDIS_PORT: String(port) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // Structured clone: a NaN (never seen) stays a NaN.
    serialization: 'advanced',
  });
  const take = mailbox<FromL1Worker>(child, 'l1 worker');
  const next = async <T extends FromL1Worker['type']>(
    type: T,
  ): Promise<Extract<FromL1Worker, { type: T }>> => {
    const message = await take();
    if (message.type !== type)
      throw new Error(`expected ${type} from a worker, got ${message.type}`);
    return message as Extract<FromL1Worker, { type: T }>;
  };
  const send = (message: ToL1Worker): void => void child.send(message);
  return {
    process: child,
    send,
    next,
    ask(message, type) {
      send(message);
      return next(type);
    },
  };
}

async function stopWorkers(workers: readonly Worker[]): Promise<void> {
  for (const w of workers) if (w.process.connected) w.send({ type: 'exit' });
  await Promise.all(
    workers.map((w) =>
      w.process.exitCode !== null || w.process.signalCode !== null
        ? undefined
        : new Promise((resolve) => {
            const timer = setTimeout(() => w.process.kill('SIGKILL'), 5000);
            w.process.once('exit', () => resolve(clearTimeout(timer)));
          }),
    ),
  );
}

interface Fleet {
  readonly writer: Worker;
  readonly readers: readonly Worker[];
}

async function open(fleet: Fleet, prefix: string, maxAge: number): Promise<void> {
  const all = [fleet.writer, ...fleet.readers];
  await Promise.all(all.map((w) => w.ask({ type: 'open', prefix, maxAge }, 'opened')));
}

/** Both readers read `key` until l1 serves it; how many did not within the worker's limit. */
async function hold(fleet: Fleet, key: string): Promise<number> {
  const held = await Promise.all(fleet.readers.map((r) => r.ask({ type: 'hold', key }, 'held')));
  return held.filter((h) => !h.ok).length;
}

function write(
  fleet: Fleet,
  key: string,
  version: number | null,
  announce: boolean,
  tag?: string,
): Promise<Extract<FromL1Worker, { type: 'wrote' }>> {
  return fleet.writer.ask({ type: 'write', key, version, announce, tag }, 'wrote');
}

type Invalidating = 'set' | 'delete' | 'deleteByTag';

async function invalidation(context: BenchContext, fleet: Fleet): Promise<void> {
  const { quick, report } = context;
  const writes = quick ? 30 : 200;
  const key = 'inv';
  // A key of its own for deleteByTag, whose entry carries the tag: the set() and delete() rounds
  // read an untagged entry, as before.
  const tagKey = 'inv-tagged';
  const tag = 'inv-tag';
  await open(fleet, 'bench:l1:inv:', 60);
  const ops: readonly Invalidating[] = ['set', 'delete', 'deleteByTag'];
  const seen: Record<Invalidating, number[]> = { set: [], delete: [], deleteByTag: [] };
  const calls: Record<Invalidating, number[]> = { set: [], delete: [], deleteByTag: [] };
  const missed: Record<Invalidating, number> = { set: 0, delete: 0, deleteByTag: 0 };
  let notHeld = 0;
  let version = 0;
  await write(fleet, key, ++version, true);
  await write(fleet, tagKey, ++version, true, tag);
  report.progress(`l1 invalidation: ${writes} sets, ${writes} deletes and ${writes} deleteByTags`);
  for (let i = 0; i < writes; i++) {
    // A measured set replaces a copy the readers hold, a measured delete too; a set after the
    // delete gives them one again (a miss is not held). deleteByTag ends the tagged key's copy,
    // and a set after it gives them one stamped with the tag's new version.
    for (const op of ops) {
      const watched = op === 'deleteByTag' ? tagKey : key;
      notHeld += await hold(fleet, watched);
      const want = op === 'set' ? ++version : MISS;
      await Promise.all(
        fleet.readers.map((r) => r.ask({ type: 'watch', key: watched, want }, 'watching')),
      );
      const wrote =
        op === 'deleteByTag'
          ? await fleet.writer.ask({ type: 'deleteByTag', tag }, 'wrote')
          : await write(fleet, key, op === 'set' ? want : null, true);
      calls[op].push(wrote.returnedAt - wrote.startedAt);
      for (const { at } of await Promise.all(fleet.readers.map((r) => r.next('seen')))) {
        if (Number.isFinite(at)) seen[op].push(at - wrote.returnedAt);
        else missed[op]++;
      }
    }
    await write(fleet, key, ++version, true);
    await write(fleet, tagKey, ++version, true, tag);
  }
  const rows = ops.map((op) => {
    const s = summarize(seen[op]);
    return [
      `${op}()`,
      fmtInt(s.count),
      fmt(s.p50, 2),
      fmt(s.p99, 2),
      fmt(s.max, 2),
      fmt(summarize(calls[op]).p50, 2),
      String(missed[op]),
    ];
  });
  report.add(
    `### Invalidation across 3 processes\n\n` +
      `Three worker processes, each with its own ioredis client and a BufferCache with l1 ` +
      `(maxAge 60 s: only an invalidation can end a copy within the run). One writes the key, ` +
      `${writes} times each \`set()\` and \`delete()\`; the two others hold the old value in l1 ` +
      `(checked before each write: a read that sent nothing), then read the key about every ` +
      `0.2 ms until they see the new value or the miss. \`deleteByTag()\`: the same, ${writes} ` +
      `times, on a second key set with \`{ tags: ['${tag}'] }\` (set again after each, so the ` +
      `readers hold a copy stamped with the tag's current version): the writer calls ` +
      `\`deleteByTag('${tag}')\`, and the readers read (\`get()\`) until it is a miss. ` +
      `Latency: the end of that read minus the ` +
      `time the writer's call returned (epoch ms, one machine); negative when a reader saw it ` +
      `before the writer's call had returned (the call waits for its SPUBLISH's answer; ` +
      `deleteByTag's script publishes before it answers). ` +
      `Each write is one sample per reader. Copies not held before a write: ${notHeld}.\n\n` +
      table(
        [
          'write',
          'samples',
          'p50 ms',
          'p99 ms',
          'max ms',
          "writer's call p50 ms",
          'not seen within 5 s',
        ],
        rows,
      ),
  );
  const p99 = Math.max(summarize(seen.set).p99, summarize(seen.delete).p99);
  target(
    'l1 invalidation across 3 processes: p99 ≤ 5 ms (set and delete)',
    `${fmt(p99, 2)} ms`,
    missed.set + missed.delete === 0 && p99 <= 5,
  );
}

interface Staleness {
  /** Reads that began after the write had returned and answered the value it replaced. */
  readonly stale: number;
  /** ms after the write returned at which the last of them began (0: none). */
  readonly worst: number;
  /** The same for the reads among them served from l1. */
  readonly worstLocal: number;
}

function staleness(streams: readonly Reads[], replaced: number, at: number): Staleness {
  let stale = 0;
  let worst = 0;
  let worstLocal = 0;
  for (const reads of streams) {
    for (let i = 0; i < reads.starts.length; i++) {
      const start = reads.starts[i]!;
      if (start <= at || reads.versions[i] !== replaced) continue;
      stale++;
      worst = Math.max(worst, start - at);
      if (reads.local[i]) worstLocal = Math.max(worstLocal, start - at);
    }
  }
  return { stale, worst, worstLocal };
}

/**
 * The oldest copy any read served from l1, in ms: from the end of the store read that kept it
 * (the reader's last one before) to the start of the read that served it.
 */
function oldestCopy(streams: readonly Reads[]): number {
  let oldest = 0;
  for (const reads of streams) {
    let keptAt = reads.storeReadBefore;
    for (let i = 0; i < reads.starts.length; i++) {
      if (!reads.local[i]) keptAt = reads.ends[i]!;
      else if (Number.isFinite(keptAt)) oldest = Math.max(oldest, reads.starts[i]! - keptAt);
    }
  }
  return oldest;
}

/** A worst age for a table: 'none' when no read was stale. */
const ageText = (stale: number, age: number): string => (stale > 0 ? fmt(age, 2) : 'none');

/** The last read served from l1 that began within [from, to), in ms after `from` (0: none). */
function lastLocal(streams: readonly Reads[], from: number, to = Infinity): number {
  let last = 0;
  for (const reads of streams) {
    for (let i = 0; i < reads.starts.length; i++) {
      const start = reads.starts[i]!;
      if (reads.local[i] && start >= from && start < to) last = Math.max(last, start - from);
    }
  }
  return last;
}

async function startStreams(
  fleet: Fleet,
  key: string,
  ms: number,
): Promise<() => Promise<Reads[]>> {
  await Promise.all(fleet.readers.map((r) => r.ask({ type: 'stream', key, ms }, 'streaming')));
  return async () =>
    (await Promise.all(fleet.readers.map((r) => r.next('streamed')))).map((s) => s.reads);
}

async function faults(context: BenchContext, fleet: Fleet): Promise<void> {
  const { quick, redis, report } = context;
  const maxAgeMs = FAULT_MAX_AGE * 1000;
  const admin = redis.client();
  const rows: string[][] = [];
  let worstOverall = 0;
  let oldest = 0;
  let notHeld = 0;
  let version = 0;
  try {
    // (a) The readers' subscriber connections killed, then a write that announces nothing.
    const rounds = quick ? 1 : 4;
    const key = 'kill';
    await open(fleet, 'bench:l1:kill:', FAULT_MAX_AGE);
    const kills: Staleness[] = [];
    const servedAfterKill: number[] = [];
    let killed = 0;
    for (let round = 0; round < rounds; round++) {
      report.progress(`l1 staleness: subscribers killed, round ${round + 1}/${rounds}`);
      const held = ++version;
      await write(fleet, key, held, true);
      // After a kill a reader keeps nothing for a second, then subscribes again: this waits.
      notHeld += await hold(fleet, key);
      const done = await startStreams(fleet, key, 500);
      await sleep(100);
      const killAt = epochMs();
      killed += Number(await admin.call('CLIENT', 'KILL', 'TYPE', 'pubsub'));
      const wrote = await write(fleet, key, ++version, false);
      const reads = await done();
      kills.push(staleness(reads, held, wrote.returnedAt));
      servedAfterKill.push(lastLocal(reads, killAt));
      oldest = Math.max(oldest, oldestCopy(reads));
    }
    const killWorst = Math.max(...kills.map((k) => k.worst));
    const killStale = kills.reduce((n, k) => n + k.stale, 0);
    worstOverall = Math.max(worstOverall, killWorst);
    rows.push([
      `subscribers killed (CLIENT KILL TYPE pubsub: ${killed} over ${rounds} rounds), then ` +
        `a set() that announces nothing`,
      String(rounds),
      fmtInt(killStale),
      ageText(killStale, killWorst),
      ageText(killStale, Math.max(...kills.map((k) => k.worstLocal))),
      `l1 served up to ${fmt(Math.max(...servedAfterKill), 2)} ms after the kill`,
    ]);

    // (b) Redis paused for 2 × maxAge while the readers read; writes during and after.
    report.progress(`l1 staleness: Redis paused for ${2 * FAULT_MAX_AGE} s`);
    const pauseKey = 'pause';
    await open(fleet, 'bench:l1:pause:', FAULT_MAX_AGE);
    const first = ++version;
    await write(fleet, pauseKey, first, true);
    notHeld += await hold(fleet, pauseKey);
    const gap = 200;
    const done = await startStreams(fleet, pauseKey, gap * 5 + 3 * maxAgeMs + 200);
    await sleep(gap);
    const pausedAt = epochMs();
    redis.pause();
    let resumedAt: number;
    let duringPause: Extract<FromL1Worker, { type: 'wrote' }>;
    const during = ++version;
    try {
      await sleep(maxAgeMs / 2);
      // The write waits for Redis: it returns once Redis is back.
      const writing = write(fleet, pauseKey, during, true);
      await sleep(pausedAt + 2 * maxAgeMs - epochMs());
      resumedAt = epochMs();
      redis.resume();
      duringPause = await writing;
    } finally {
      redis.resume();
    }
    await sleep(gap);
    const deleted = await write(fleet, pauseKey, null, true);
    await sleep(gap);
    const again = ++version;
    await write(fleet, pauseKey, again, true);
    await sleep(gap);
    const unannounced = await write(fleet, pauseKey, ++version, false);
    const reads = await done();
    oldest = Math.max(oldest, oldestCopy(reads));
    const cases: [string, number, number][] = [
      ['set() during the pause (returns once Redis is back)', first, duringPause.returnedAt],
      ['delete() after the pause', during, deleted.returnedAt],
      [
        'set() after the pause by a cache without l1 (announces nothing: only maxAge ends ' +
          'the copies)',
        again,
        unannounced.returnedAt,
      ],
    ];
    for (const [label, replaced, at] of cases) {
      const s = staleness(reads, replaced, at);
      worstOverall = Math.max(worstOverall, s.worst);
      rows.push([
        label,
        '1',
        fmtInt(s.stale),
        ageText(s.stale, s.worst),
        ageText(s.stale, s.worstLocal),
        '',
      ]);
    }
    rows.at(-3)![5] =
      `l1 served up to ${fmt(lastLocal(reads, pausedAt, resumedAt), 0)} ms into the ` +
      `${fmt(resumedAt - pausedAt, 0)} ms pause`;
  } finally {
    admin.disconnect();
  }
  report.add(
    `### Staleness under faults\n\n` +
      `The same three processes, with l1 maxAge ${FAULT_MAX_AGE} s. The two readers hold the ` +
      `value in l1, then read the key about every 0.2 ms. A stale read: one that began after the ` +
      `write's call had returned and still answered the value it replaced; its age is how long ` +
      `after the write it began, and the worst age is the largest. (a) An admin client kills ` +
      `every pub/sub connection, then a cache without l1 sets the key (it announces nothing): ` +
      `only the readers' flush on losing their subscriber stops the old value. (b) Redis is ` +
      `paused (SIGSTOP) for ${2 * FAULT_MAX_AGE} s while they read; a set() is sent during the ` +
      `pause, a delete() after it, then a set() again, and a set() by a cache without l1 that ` +
      `announces nothing. The oldest copy any read served from l1, counted from the store read ` +
      `that kept it: ${fmt(oldest, 1)} ms (maxAge ${maxAgeMs} ms). Copies not held when a round ` +
      `began: ${notHeld}.\n\n` +
      table(
        ['fault', 'rounds', 'stale reads', 'worst age ms', 'worst age from l1 ms', 'note'],
        rows,
      ),
  );
  target(
    `l1 staleness under faults: worst age ≤ maxAge (${maxAgeMs} ms), oldest copy served too`,
    `${fmt(worstOverall, 1)} ms, oldest copy ${fmt(oldest, 1)} ms`,
    worstOverall <= maxAgeMs && oldest <= maxAgeMs,
  );
}

// ---------------------------------------------------------------------------------------------
// 4. What one deleteByTag costs Redis, against the number of entries that carry the tag.

/** Entries carrying the tag in the large case (quick mode: fewer, the same point). */
const TAGGED_ENTRIES = { full: 100_000, quick: 10_000 };
/** set() calls under way at once while the entries are made: one pipeline's worth each. */
const FILL_BATCH = 5000;
/** Entries read before and after the deleteByTag: hits, then misses. */
const SAMPLE = 100;

interface TagCost {
  readonly entries: number;
  readonly fillMs: number;
  /** `INFO commandstats` around one deleteByTag: commands inside its script counted too. */
  readonly commands: CommandDelta;
  /** A second deleteByTag of the tag under MONITOR: round trips, and commands in scripts. */
  readonly seen: MonitoredCommands;
  readonly callMs: number;
  readonly sampled: number;
  readonly hitsBefore: number;
  readonly hitsAfter: number;
}

/** The same command names with the same calls. */
function sameCommands(a: ReadonlyMap<string, number>, b: ReadonlyMap<string, number>): boolean {
  return a.size === b.size && [...a].every(([name, calls]) => b.get(name) === calls);
}

async function tagCostOf(
  context: BenchContext,
  cache: BufferCache,
  admin: Redis,
  entries: number,
): Promise<TagCost> {
  const { redis, report } = context;
  const tag = `count-${entries}`;
  const keyOf = (i: number): string => `tagged:${entries}:${i}`;
  report.progress(`l1 deleteByTag cost: ${fmtInt(entries)} entries tagged ${tag}`);
  const filling = performance.now();
  for (let from = 0; from < entries; from += FILL_BATCH) {
    const batch = Array.from({ length: Math.min(FILL_BATCH, entries - from) }, (_, i) =>
      // A minute is enough: the store drops them soon after the section.
      cache.set(keyOf(from + i), { i: from + i }, { ttl: 60, tags: [tag] }),
    );
    await Promise.all(batch);
  }
  const fillMs = performance.now() - filling;
  const sample = Array.from({ length: Math.min(SAMPLE, entries) }, (_, j) =>
    keyOf(Math.floor((j * entries) / Math.min(SAMPLE, entries))),
  );
  const hits = async (): Promise<number> =>
    (await Promise.all(sample.map((k) => cache.get(k)))).filter((v) => v !== undefined).length;
  const hitsBefore = await hits();
  const before = await commandStats(admin);
  const started = performance.now();
  await cache.deleteByTag(tag);
  const callMs = performance.now() - started;
  const commands = commandDelta(before, await commandStats(admin));
  const hitsAfter = await hits();
  // The entries still carry the tag (nothing deleted them): the same call, seen by MONITOR.
  const seen = await monitorCommands(redis, () => cache.deleteByTag(tag));
  return {
    entries,
    fillMs,
    commands,
    seen,
    callMs,
    sampled: sample.length,
    hitsBefore,
    hitsAfter,
  };
}

/** Waits until `channel` has a shard subscriber. */
async function subscribed(admin: Redis, channel: string): Promise<void> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const [, count] = (await admin.call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
    if (count > 0) return;
    await sleep(5);
  }
  throw new Error(`no subscriber on ${channel} after 5 s`);
}

async function tagCost(context: BenchContext): Promise<void> {
  const { quick, redis, report } = context;
  const many = quick ? TAGGED_ENTRIES.quick : TAGGED_ENTRIES.full;
  const client = redis.client();
  const admin = redis.client();
  const lock = new RedisLockService({ redis: client, namespace: 'bench:l1:' });
  // No l1: a set() is then one SET, and the bump is the same script either way.
  const prefix = 'bench:l1:tag-cost:';
  const cache = new BufferCache({ lock, options: { logger: silent, cachePrefix: prefix } });
  const costs: TagCost[] = [];
  try {
    // The first call of a script in a process may load it (NOSCRIPT, then EVAL): not measured.
    await cache.deleteByTag('warm-up');
    // A tagged set subscribes the cache to its channel, on a connection of its own: its
    // SSUBSCRIBE must not land in a measured call.
    await cache.set('warm-up', 1, { ttl: 60, tags: ['warm-up'] });
    await subscribed(admin, `${prefix}{nestjs-buffer-lock}:l1`);
    for (const entries of [1, many]) costs.push(await tagCostOf(context, cache, admin, entries));
  } finally {
    releaseSubscriberFor(client as unknown as DuplicableClient).close();
    client.disconnect();
    admin.disconnect();
  }
  const rows = costs.map((c) => [
    fmtInt(c.entries),
    fmt(c.fillMs / 1000, 1),
    fmtInt(c.commands.total),
    describeCommands(c.commands.byCommand, 6),
    fmtInt(c.seen.fromClients),
    fmtInt(c.seen.inScripts),
    describeCommands(c.seen.byCommand, 6),
    fmt(c.callMs, 2),
    `${c.hitsBefore}/${c.sampled} → ${c.hitsAfter}/${c.sampled}`,
  ]);
  report.add(
    `### deleteByTag: cost against the number of entries\n\n` +
      `One BufferCache in the bench process (no l1) makes entries with ` +
      `\`set(key, value, { ttl: 60, tags: [tag] })\`, ${FILL_BATCH} calls under way at a time, ` +
      `then calls \`deleteByTag(tag)\` once, on a tag carried by 1 entry and by ` +
      `${fmtInt(many)}${quick ? ' (quick mode; a full run: ' + fmtInt(TAGGED_ENTRIES.full) + ')' : ''}. ` +
      `Commands: \`INFO commandstats\` before and after the call (those its script ran counted ` +
      `too); then a second call on the same tag under MONITOR (its entries still carry it), ` +
      `which tells a client's commands (round trips) from the script's. Reads: \`get()\` of ` +
      `${SAMPLE} entries spread over the tagged ones (all of them when fewer) before the call ` +
      `and after it: hits, then none.\n\n` +
      table(
        [
          'entries with the tag',
          'fill s',
          'Redis cmds (commandstats)',
          'by command',
          'client cmds (MONITOR)',
          'in scripts (MONITOR)',
          'by command (MONITOR)',
          'call ms',
          'sampled hits before → after',
        ],
        rows,
      ),
  );
  const [one, all] = costs as [TagCost, TagCost];
  const same =
    sameCommands(one.commands.byCommand, all.commands.byCommand) &&
    sameCommands(one.seen.byCommand, all.seen.byCommand) &&
    one.seen.fromClients === all.seen.fromClients;
  target(
    `deleteByTag: same commands for 1 and ${fmtInt(many)} entries`,
    `${describeCommands(one.commands.byCommand, 6)} vs ` +
      `${describeCommands(all.commands.byCommand, 6)}; ` +
      `${one.seen.fromClients} vs ${all.seen.fromClients} round trip(s)` +
      (all.hitsAfter === 0 ? '' : `; ${all.hitsAfter}/${all.sampled} still hit after`),
    same && one.hitsAfter === 0 && all.hitsAfter === 0,
  );
}

async function l1(context: BenchContext): Promise<void> {
  context.report.add(`## 10. In-process tier (l1)\n`);
  await hotHit(context);
  await hotHitAgainstBaseline(context);
  const workers = [0, 1, 2].map(() => startWorker(context.redis.port));
  try {
    await Promise.all(workers.map((w) => w.next('ready')));
    const fleet: Fleet = { writer: workers[0]!, readers: workers.slice(1) };
    await invalidation(context, fleet);
    await faults(context, fleet);
  } finally {
    await stopWorkers(workers);
  }
  // With the fleet gone: commandstats counts every client's commands.
  await tagCost(context);
}

export const l1Section: BenchSection = {
  id: 'l1',
  title: '10. In-process tier (l1)',
  run: l1,
};
