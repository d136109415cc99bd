// One worker process of the cache benchmark: 250 concurrent callers per `go`, each asking for the
// same key through one cache strategy (cold, stale or fresh). Started by cache.bench.ts with fork().
import 'reflect-metadata';
import KeyvRedis from '@keyv/redis';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { createCache } from 'cache-manager';
import { appendFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { Keyv } from 'keyv';
import { BufferCache, BufferLockModule } from '../../lib/index.js';
import { EntryStore } from '../../lib/cache/entry-store.js';
import { epochMs, REPORT_AFTER_MS, sleep } from './harness.js';
import {
  L1_MAX_AGE,
  L1_STRATEGY,
  WAKE_CHANNEL,
  type CacheMode,
  type CacheRound,
  type FromCacheWorker,
  type ToCacheWorker,
} from './cache.protocol.js';

const port = Number(process.env['BENCH_REDIS_PORT']);
const callers = Number(process.env['BENCH_CALLERS'] ?? 250);
const buildMs = Number(process.env['BENCH_BUILD_MS'] ?? 200);
const url = `redis://127.0.0.1:${port}`;

/**
 * With BENCH_WAKE_TRACE=<file>, each cold round (but the one under MONITOR) appends one line to
 * the file: this process's events in the round (commands sent and answered, shard messages heard,
 * the build's end, the first and the last caller served), for wake-trace.ts. Off by default: it
 * wraps every ioredis command of the process.
 */
const traceFile = process.env['BENCH_WAKE_TRACE'];
const events: [number, string][] = [];
if (traceFile) traceIoredis();

function traceIoredis(): void {
  const proto = Redis.prototype as unknown as {
    sendCommand(command: { name: string; promise?: Promise<unknown> }, ...rest: unknown[]): unknown;
    emit(event: string | symbol, ...rest: unknown[]): boolean;
  };
  const { sendCommand, emit } = proto;
  proto.sendCommand = function (this: Redis, command, ...rest) {
    events.push([epochMs(), `sent ${command.name}`]);
    const answered = (): number => events.push([epochMs(), `answered ${command.name}`]);
    command.promise?.then(answered, answered);
    return sendCommand.call(this, command, ...rest);
  };
  proto.emit = function (this: Redis, event, ...rest) {
    if (event === 'smessage') events.push([epochMs(), 'heard']);
    return emit.call(this, event, ...rest);
  };
}

/** A cached value: which round's build made it. */
interface Report {
  readonly builtBy: number;
  readonly round: string;
}

// Per round: the factory runs, and the reads the strategies' callers make.
let round = '';
let builds = 0;
let buildEnds: number[] = [];
let reads = 0;

/**
 * Counts the store reads the callers' lookups make: overlapping lookups of one key in a process
 * share one read, so callers are not reads. A re-read under the lock is not a lookup.
 */
function countLookupReads(): void {
  const proto = EntryStore.prototype as unknown as {
    lookup(this: { reading: Map<string, unknown> }, ...args: unknown[]): unknown;
  };
  const lookup = proto.lookup;
  proto.lookup = function (this: { reading: Map<string, unknown> }, ...args: unknown[]) {
    const before = this.reading.size;
    const found = lookup.apply(this, args);
    if (this.reading.size > before) reads++;
    return found;
  };
}

async function build(): Promise<Report> {
  builds++;
  await sleep(buildMs);
  buildEnds.push(epochMs());
  return { builtBy: process.pid, round };
}

/** The stale rounds' freshness: BufferCache and bentocache serve an entry past its ttl in grace. */
const STALE_TTL_MS = 300;
/** cache-manager's wrap() refreshes in the background once less than this much ttl is left. */
const WRAP_TTL_MS = 10_000;
const WRAP_REFRESH_THRESHOLD_MS = WRAP_TTL_MS - STALE_TTL_MS;

interface Strategy {
  call(key: string, mode: CacheMode): Promise<Report>;
  /** commandstats entries of one cache read (a script read counts its GET too). */
  readonly commandsPerRead: number;
}

const strategies = new Map<string, Strategy>();
const unavailable: Record<string, string> = {};
const closers: (() => Promise<unknown>)[] = [];

/** A Keyv on @keyv/redis whose reads are counted. */
function countedKeyv(namespace: string): Keyv {
  const keyv = new Keyv({ store: new KeyvRedis(url), namespace });
  const get = keyv.get.bind(keyv) as (...args: unknown[]) => Promise<unknown>;
  (keyv as unknown as { get: typeof get }).get = (...args) => {
    reads++;
    return get(...args);
  };
  closers.push(() => keyv.disconnect());
  return keyv;
}

/** Set once the wake-up floor's connections are up. */
let wake = async (_idleMs: number): Promise<void> => {};

/**
 * The wake-up floor: what one SPUBLISH from a worker woken by a timer takes to reach the others,
 * each on a plain ioredis subscriber, with no library in the way.
 */
async function listenForWakes(): Promise<void> {
  const publisher = new Redis({ port, host: '127.0.0.1' });
  const listener = new Redis({ port, host: '127.0.0.1' });
  closers.push(async () => {
    publisher.disconnect();
    listener.disconnect();
  });
  // A worker hears its own wake-ups too: those are not reported.
  let own = 0;
  listener.on('smessage', () => {
    if (own > 0) own--;
    else send({ type: 'heard', at: epochMs() });
  });
  await Promise.all([publisher.ping(), listener.ssubscribe(WAKE_CHANNEL)]);
  wake = async (idleMs) => {
    await sleep(idleMs);
    own++;
    const sentAt = epochMs();
    await publisher.spublish(WAKE_CHANNEL, 'x');
    send({ type: 'woke', sentAt });
  };
}
async function setUp(): Promise<void> {
  await listenForWakes();
  // BufferCache from the module, on the lock's own Redis client (the built-in store).
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const CacheApp = class {};
  Module({
    imports: [
      BufferLockModule.forRoot({
        redis: url,
        namespace: 'bench:cache:',
        lockTimeout: 5,
        logger: { log() {}, warn() {}, error() {} },
      }),
    ],
  })(CacheApp);
  const app: INestApplicationContext = await NestFactory.createApplicationContext(CacheApp, {
    logger: false,
  });
  closers.push(() => app.close());
  const cache = app.get(BufferCache);
  countLookupReads();
  strategies.set('BufferCache.getOrSet', {
    commandsPerRead: 2,
    call: (key, mode) =>
      cache.getOrSet(
        key,
        build,
        mode === 'stale' ? { ttl: STALE_TTL_MS / 1000, grace: 60 } : { ttl: 60 },
      ),
  });

  // What CacheInterceptor does per request: get; on a miss, run the handler and set. No
  // coalescing, and no stale serving: an entry past its ttl is gone.
  const aside = createCache({ stores: [countedKeyv('bench-aside')] });
  strategies.set('CacheInterceptor-style (get → build → set)', {
    commandsPerRead: 1,
    async call(key, mode) {
      const hit = await aside.get<Report>(key);
      if (hit !== undefined && hit !== null) return hit;
      const value = await build();
      await aside.set(key, value, mode === 'stale' ? STALE_TTL_MS : 60_000);
      return value;
    },
  });

  // wrap(): one flight per key in the process; a value with less than refreshThreshold of its
  // ttl left is returned while it is rebuilt in the background (one rebuild per process).
  const wrapped = createCache({ stores: [countedKeyv('bench-wrap')] });
  strategies.set('cache-manager wrap()', {
    commandsPerRead: 1,
    call: (key, mode) =>
      mode === 'stale'
        ? wrapped.wrap(key, build, WRAP_TTL_MS, WRAP_REFRESH_THRESHOLD_MS)
        : wrapped.wrap(key, build, 60_000),
  });

  await setUpL1();
  await setUpBentocache();
}

/** The l1 module's cache, for `hold`. */
let l1Cache: BufferCache | undefined;
/** A hold gives up after this long. */
const HOLD_LIMIT_MS = 5000;

/** Reads until one sends nothing to Redis (no store read): `l1` then holds a copy of `key`. */
async function holdCopy(key: string): Promise<boolean> {
  const deadline = Date.now() + HOLD_LIMIT_MS;
  do {
    const before = reads;
    // get(), not getOrSet(): a stale entry must not start its refresh before the round.
    await l1Cache!.get(key);
    if (reads === before) return true;
    await sleep(1);
  } while (Date.now() < deadline);
  return false;
}

/**
 * The same module with `l1`, an application context of its own (the module is global): its
 * copies keep the entry's ttl and grace, so a copy held past ttl is served stale at once.
 */
async function setUpL1(): Promise<void> {
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const L1App = class {};
  Module({
    imports: [
      BufferLockModule.forRoot({
        redis: url,
        namespace: 'bench:cache:',
        lockTimeout: 5,
        l1: { maxAge: L1_MAX_AGE },
        logger: { log() {}, warn() {}, error() {} },
      }),
    ],
  })(L1App);
  const app: INestApplicationContext = await NestFactory.createApplicationContext(L1App, {
    logger: false,
  });
  closers.push(() => app.close());
  const cache = app.get(BufferCache);
  l1Cache = cache;
  strategies.set(L1_STRATEGY, {
    commandsPerRead: 2,
    call: (key, mode) =>
      cache.getOrSet(
        key,
        build,
        mode === 'stale' ? { ttl: STALE_TTL_MS / 1000, grace: 60 } : { ttl: 60 },
      ),
  });
  // The tier subscribes on first use: subscribed before the first round's hold.
  const probe = `probe:l1:${process.pid}`;
  await cache.set(probe, 1, { ttl: 60 });
  if (!(await holdCopy(probe))) throw new Error('l1: every read still reaches Redis after 5 s');
}

/** bentocache, its Redis (L2) layer alone, on an ioredis client whose GETs are counted. */
async function setUpBentocache(): Promise<void> {
  const name = 'bentocache getOrSet';
  try {
    const { BentoCache, bentostore } = await import('bentocache');
    const { redisDriver } = await import('bentocache/drivers/redis');
    const connection = new Redis({ port, host: '127.0.0.1' });
    const get = connection.get.bind(connection);
    connection.get = ((...args: Parameters<typeof get>) => {
      reads++;
      return get(...args);
    }) as typeof get;
    const bento = new BentoCache({
      default: 'redis',
      stores: {
        redis: bentostore().useL2Layer(redisDriver({ connection, prefix: 'bench-bento' })),
      },
    });
    closers.push(() => bento.disconnectAll());
    const call = (key: string, mode: CacheMode): Promise<Report> =>
      bento.getOrSet({
        key,
        factory: build,
        ...(mode === 'stale' ? { ttl: STALE_TTL_MS, grace: '1m', timeout: 0 } : { ttl: '1m' }),
      });
    // Fails here, not in a round, if the driver does not work with this ioredis.
    await call(`probe:${process.pid}`, 'cold');
    strategies.set(name, { commandsPerRead: 1, call });
  } catch (error) {
    unavailable[name] =
      `failed to start: ${error instanceof Error ? error.message : String(error)}`;
  }
}

async function go(
  { strategy: name, key, mode, monitored }: ToCacheWorker & { type: 'go' },
  strategy: Strategy,
): Promise<CacheRound> {
  round = `go:${key}`;
  events.length = 0;
  builds = 0;
  buildEnds = [];
  reads = 0;
  const latencies: number[] = [];
  let lastServed = 0;
  let waited = 0;
  let errors = 0;
  let firstError: string | undefined;
  const start = epochMs();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      try {
        const value = await strategy.call(key, mode);
        if (value.round === round) waited++;
      } catch (error) {
        errors++;
        firstError ??= error instanceof Error ? error.message : String(error);
      }
      const now = epochMs();
      latencies.push(now - start);
      lastServed = Math.max(lastServed, now);
    }),
  );
  const callerReads = reads;
  if (traceFile && mode === 'cold' && !monitored) {
    const served = latencies.map((ms) => start + ms);
    events.push([Math.min(...served), 'first served'], [lastServed, 'last served']);
    for (const end of buildEnds) events.push([end, 'build end']);
    events.sort((a, b) => a[0] - b[0]);
    appendFileSync(
      traceFile,
      `${JSON.stringify({ strategy: name, key, pid: process.pid, events })}\n`,
    );
  }
  // Background refreshes (stale rounds) end after the callers: wait for them, so they count;
  // other rounds wait a moment too (REPORT_AFTER_MS).
  await sleep(mode === 'stale' ? buildMs + 100 : REPORT_AFTER_MS);
  return {
    builds,
    buildEnds,
    latencies,
    lastServed,
    waited,
    reads: callerReads,
    commandsPerRead: strategy.commandsPerRead,
    errors,
    firstError,
  };
}

const send = (message: FromCacheWorker): void => void process.send!(message);

async function handle(message: ToCacheWorker): Promise<void> {
  if (message.type === 'exit') {
    await Promise.allSettled(closers.map((close) => close()));
    process.exit(0);
  }
  if (message.type === 'wake') return wake(message.idleMs);
  const strategy = strategies.get(message.strategy);
  if (!strategy) throw new Error(`strategy ${message.strategy} is not available`);
  if (message.type === 'hold') return send({ type: 'held', ok: await holdCopy(message.key) });
  if (message.type === 'prime') {
    round = 'prime';
    await strategy.call(message.key, message.mode);
    return send({ type: 'primed' });
  }
  send({ type: 'done', result: await go(message, strategy) });
}

process.on('message', (message: ToCacheWorker) => {
  handle(message).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
});

setUp().then(
  () => send({ type: 'ready', unavailable }),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
