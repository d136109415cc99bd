// One worker process of the l1 benchmark: a BufferCache with `l1` on a client of its own, as a
// process of a fleet has it. The parent makes one worker write and the others read, and compares
// the times they report (epoch ms: one machine, one clock). Started by l1.bench.ts with fork().
import { Redis } from 'ioredis';
import { BufferCache, RedisLockService } from '../../lib/index.js';
import { epochMs } from './harness.js';
import { MISS, type FromL1Worker, type Reads, type ToL1Worker } from './l1.protocol.js';

const port = Number(process.env['BENCH_REDIS_PORT']);
/** A hold or a watch gives up after this long. */
const LIMIT_MS = Number(process.env['BENCH_LIMIT_MS'] ?? 5000);
/** The pause between two reads of a loop. */
const PACE_MS = 0.2;
const silent = { log() {}, warn() {}, error() {} };

interface Value {
  readonly version: number;
}

const client = new Redis({ port, host: '127.0.0.1' });
client.on('error', () => {});
// Commands sent on the cache's client (its subscriber is a duplicate of its own, not counted): a
// read during which none was sent was served from l1.
let sent = 0;
const sendCommand = client.sendCommand.bind(client);
client.sendCommand = ((...args: Parameters<typeof sendCommand>) => {
  sent++;
  return sendCommand(...args);
}) as typeof sendCommand;
const lock = new RedisLockService({ redis: client, namespace: 'bench:l1:' });

let withL1: BufferCache | undefined;
let withoutL1: BufferCache | undefined;

function caches(): { withL1: BufferCache; withoutL1: BufferCache } {
  if (!withL1 || !withoutL1) throw new Error('no cache is open');
  return { withL1, withoutL1 };
}

const gate = new Int32Array(new SharedArrayBuffer(4));

/**
 * About PACE_MS with the thread asleep (a setImmediate loop alone would keep a core busy per
 * reader, on a machine of two), then a turn of the event loop, which takes in what came meanwhile.
 */
async function pace(): Promise<void> {
  Atomics.wait(gate, 0, 0, PACE_MS);
  await new Promise<void>((resolve) => setImmediate(resolve));
}

interface Read {
  readonly start: number;
  readonly end: number;
  readonly version: number;
  readonly local: boolean;
}

/** The end of the last read that was not served from l1 (the one that kept the copy held now). */
let storeReadAt = Number.NaN;

async function read(key: string): Promise<Read> {
  const before = sent;
  const start = epochMs();
  const value = await caches().withL1.get<Value>(key);
  const end = epochMs();
  const local = sent === before;
  if (!local) storeReadAt = end;
  return { start, end, version: value?.version ?? MISS, local };
}

async function hold(key: string): Promise<FromL1Worker> {
  const deadline = epochMs() + LIMIT_MS;
  let last: Read;
  do {
    last = await read(key);
    if (last.local) return { type: 'held', ok: true, version: last.version };
    await pace();
  } while (epochMs() < deadline);
  return { type: 'held', ok: false, version: last.version };
}

async function watch(key: string, want: number): Promise<FromL1Worker> {
  const deadline = epochMs() + LIMIT_MS;
  do {
    const { version, end } = await read(key);
    if (version === want) return { type: 'seen', at: end };
    await pace();
  } while (epochMs() < deadline);
  return { type: 'seen', at: Number.NaN };
}

async function stream(key: string, ms: number): Promise<FromL1Worker> {
  const starts: number[] = [];
  const ends: number[] = [];
  const versions: number[] = [];
  const local: boolean[] = [];
  const storeReadBefore = storeReadAt;
  const end = epochMs() + ms;
  do {
    const one = await read(key);
    starts.push(one.start);
    ends.push(one.end);
    versions.push(one.version);
    local.push(one.local);
    await pace();
  } while (epochMs() < end);
  const reads: Reads = { starts, ends, versions, local, storeReadBefore };
  return { type: 'streamed', reads };
}

async function write(
  key: string,
  version: number | null,
  announce: boolean,
  tag: string | undefined,
): Promise<void> {
  const { withL1: announcing, withoutL1: unannounced } = caches();
  const cache = announce ? announcing : unannounced;
  const options = tag === undefined ? { ttl: 3600 } : { ttl: 3600, tags: [tag] };
  const startedAt = epochMs();
  if (version === null) await cache.delete(key);
  else await cache.set(key, { version } satisfies Value, options);
  send({ type: 'wrote', startedAt, returnedAt: epochMs() });
}

async function deleteByTag(tag: string): Promise<void> {
  const startedAt = epochMs();
  await caches().withL1.deleteByTag(tag);
  send({ type: 'wrote', startedAt, returnedAt: epochMs() });
}

const send = (message: FromL1Worker): void => void process.send!(message);

async function handle(message: ToL1Worker): Promise<void> {
  switch (message.type) {
    case 'exit':
      client.disconnect();
      process.exit(0);
      break;
    case 'open': {
      const options = { logger: silent, cachePrefix: message.prefix };
      const l1 = { maxEntries: 10_000, maxAge: message.maxAge };
      withL1 = new BufferCache({ lock, options: { ...options, l1 } });
      withoutL1 = new BufferCache({ lock, options });
      return send({ type: 'opened' });
    }
    case 'hold':
      return send(await hold(message.key));
    case 'watch':
      send({ type: 'watching' });
      return send(await watch(message.key, message.want));
    case 'write':
      return write(message.key, message.version, message.announce, message.tag);
    case 'deleteByTag':
      return deleteByTag(message.tag);
    case 'stream':
      send({ type: 'streaming' });
      return send(await stream(message.key, message.ms));
  }
}

process.on('message', (message: ToL1Worker) => {
  handle(message).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
});

client.ping().then(
  () => send({ type: 'ready' }),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
