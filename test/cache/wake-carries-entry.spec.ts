import type { Redis } from 'ioredis';
import { Keyv } from 'keyv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  RedisLockService,
  SingleFlightEngine,
  type ResultSerializer,
} from '../../lib/index.js';
import { addressOf, watched } from '../support/command-stats.js';
import { monitor, type MonitoredCommand } from '../support/monitor.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { sleep } from '../single-flight/support.js';

/**
 * When a build ends, the release's wake-up carries the entry (up to 64 KiB): a worker that waited
 * answers from the message, with no read. Two workers here are two services on clients of their
 * own, on one real redis-server; MONITOR shows what each of them sends.
 */

const silent = { log() {}, warn() {}, error() {} };
const BUILD_MS = 150;

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

interface Worker {
  readonly client: Redis;
  readonly lock: RedisLockService;
  readonly engine: SingleFlightEngine;
  readonly cache: BufferCache;
}

function worker(namespace: string, store?: object, serializer?: ResultSerializer): Worker {
  const client = server.client();
  const lock = new RedisLockService({ redis: client, namespace });
  const engine = new SingleFlightEngine({ lock, options: { logger: silent, serializer } });
  const cache = new BufferCache({ lock, engine, store, options: { logger: silent } });
  return { client, lock, engine, cache };
}

/** The wake-ups published on `channel`, as the subscribers got them. */
async function wakeUps(channel: string): Promise<{ texts: string[]; stop: () => void }> {
  const subscriber = server.client();
  const texts: string[] = [];
  subscriber.on('smessage', (_channel: string, text: string) => void texts.push(text));
  await subscriber.ssubscribe(channel);
  return { texts, stop: () => subscriber.disconnect() };
}

/** The commands `client` sent after the release's SPUBLISH. */
function sentAfterRelease(seen: readonly MonitoredCommand[], client: Redis): string[][] {
  const released = seen.findIndex((c) => c.args[0]?.toLowerCase() === 'spublish');
  expect(released).toBeGreaterThan(-1);
  return seen.slice(released + 1).flatMap((c) => (c.source === addressOf(client) ? [c.args] : []));
}

const slowBuild =
  <T>(value: T) =>
  async (): Promise<T> => {
    await sleep(BUILD_MS);
    return value;
  };

/** Resolves once the lock on `key` is held, so the worker started next finds the build running. */
const untilHeld = (key: string): Promise<void> =>
  until(async () => (await admin.exists(key)) === 1);

/**
 * Watches for a caller that waits on `key`'s release: it subscribed, then found the lock still
 * held. A release between those two steps is a race the waiter settles by reading the entry, so
 * the tests of a waiter that hears the release end their build only once it `waits`.
 */
async function waiterOn(key: string): Promise<{ waits: Promise<void> }> {
  let subscribed = false;
  const found = deferred();
  const stop = await monitor(admin, ({ args: [name, ...rest] }) => {
    const command = name?.toLowerCase();
    if (command === 'ssubscribe' && rest.includes(key)) subscribed = true;
    else if (subscribed && command === 'pttl' && rest[0] === key) found.resolve();
  });
  return { waits: found.promise.finally(stop) };
}

/** A build of BUILD_MS that ends no sooner than `waiter` waits for its release. */
const heardBuild =
  <T>(value: T, waiter: { waits: Promise<void> }) =>
  async (): Promise<T> => {
    await sleep(BUILD_MS);
    await waiter.waits;
    return value;
  };

describe('a waiting worker answers from the wake-up', () => {
  it('the entry rides the release: the waiter gets the value and reads nothing after it', async () => {
    const [a, b] = [worker('wake:entry:'), worker('wake:entry:')];
    await Promise.all([a.cache.get('warm'), b.cache.get('warm')]);
    const key = a.lock.redisKey('report');
    const wake = await wakeUps(key);
    const waiter = await waiterOn(key);
    let builds = 0;
    const factory = (): Promise<{ rows: number[] }> => {
      builds++;
      return heardBuild({ rows: [1, 2, 3] }, waiter)();
    };
    let answers: unknown[] = [];
    const seen = await watched(server, async () => {
      const first = a.cache.getOrSet('report', factory, { ttl: 60 });
      await untilHeld(key);
      answers = await Promise.all([first, b.cache.getOrSet('report', factory, { ttl: 60 })]);
    });
    wake.stop();
    expect(builds).toBe(1);
    expect(answers).toEqual([{ rows: [1, 2, 3] }, { rows: [1, 2, 3] }]);
    expect(sentAfterRelease(seen, b.client)).toEqual([]);
    expect(wake.texts).toHaveLength(1);
    expect(wake.texts[0]).toMatch(/^=e\d+:\d+:\d+:6:report\{"rows":\[1,2,3\]\}$/);
  });

  it('a miss whose lookup finds the build running takes no lock: it waits for the release at once', async () => {
    const [a, b] = [worker('wake:held:'), worker('wake:held:')];
    await Promise.all([a.cache.get('warm'), b.cache.get('warm')]);
    const key = a.lock.redisKey('report');
    const waiter = await waiterOn(key);
    const first = a.cache.getOrSet('report', heardBuild('built by a', waiter), { ttl: 60 });
    await untilHeld(key);
    let answer: unknown;
    const seen = await watched(server, async () => {
      answer = await b.cache.getOrSet('report', slowBuild('built by b'), { ttl: 60 });
    });
    await first;
    expect(answer).toBe('built by a');
    const sent = seen.filter((c) => c.source === addressOf(b.client)).map((c) => c.args[0]!);
    // The lookup (the entry, or its lock's PTTL), then the check after subscribing: no SET NX.
    expect(sent.map((name) => name.toLowerCase()).filter((name) => name === 'set')).toEqual([]);
    expect(sent[0]!.toLowerCase()).toBe('evalsha');
    expect(sent.length).toBeLessThanOrEqual(3);
  });

  it('an entry over 64 KiB is not carried: the wake-up says "read it" and the waiter reads once', async () => {
    const [a, b] = [worker('wake:big:'), worker('wake:big:')];
    await Promise.all([a.cache.get('warm'), b.cache.get('warm')]);
    const key = a.lock.redisKey('big');
    const wake = await wakeUps(key);
    const waiter = await waiterOn(key);
    const big = 'x'.repeat(70 * 1024);
    let answers: unknown[] = [];
    const seen = await watched(server, async () => {
      const first = a.cache.getOrSet('big', heardBuild(big, waiter), { ttl: 60 });
      await untilHeld(key);
      answers = await Promise.all([
        first,
        b.cache.getOrSet('big', slowBuild('other'), { ttl: 60 }),
      ]);
    });
    wake.stop();
    expect(answers).toEqual([big, big]);
    expect(wake.texts).toHaveLength(1);
    expect(wake.texts[0]!.startsWith('=')).toBe(false);
    // A script's first run on a server is answered NOSCRIPT and sent again as EVAL: one read still.
    const reads = sentAfterRelease(seen, b.client).filter((args) => /^evalsha$/i.test(args[0]!));
    expect(reads).toHaveLength(1);
  });

  it('with a store of its own (Keyv) the entry rides the release too: the waiter reads no store', async () => {
    const keyv = new Keyv();
    let storeReads = 0;
    const get = keyv.get.bind(keyv);
    const counted = Object.assign(keyv, {
      get: (...args: Parameters<typeof get>) => {
        storeReads++;
        return get(...args);
      },
    });
    const [a, b] = [worker('wake:keyv:', counted), worker('wake:keyv:', counted)];
    const key = a.lock.redisKey('report');
    const waiter = await waiterOn(key);
    const first = a.cache.getOrSet('report', heardBuild({ n: 7 }, waiter), { ttl: 60 });
    await untilHeld(key);
    const readsBeforeB = storeReads;
    const second = b.cache.getOrSet('report', slowBuild({ n: 8 }), { ttl: 60 });
    expect(await Promise.all([first, second])).toEqual([{ n: 7 }, { n: 7 }]);
    // B's own lookup, and nothing after the wake-up.
    expect(storeReads - readsBeforeB).toBe(1);
    expect(await keyv.get('buffer:cache:report')).toMatch(/^\d+:\d+:\d+:6:report\{"n":7\}$/);
  });

  it('a waiter whose subscriber connection was killed during the build reads the entry instead', async () => {
    const [a, b] = [worker('wake:lost:'), worker('wake:lost:')];
    await Promise.all([a.cache.get('warm'), b.cache.get('warm')]);
    let builds = 0;
    const factory = (): Promise<string> => {
      builds++;
      return slowBuild('built once')();
    };
    const key = a.lock.redisKey('report');
    const waiter = await waiterOn(key);
    const first = a.cache.getOrSet('report', factory, { ttl: 60 });
    await untilHeld(key);
    const second = b.cache.getOrSet('report', factory, { ttl: 60 });
    await waiter.waits;
    const killed = Number(await server.client().call('CLIENT', 'KILL', 'TYPE', 'pubsub'));
    expect(killed).toBeGreaterThan(0);
    expect(await Promise.all([first, second])).toEqual(['built once', 'built once']);
    expect(builds).toBe(1);
  });
});

describe('a waiting worker answers from the wake-up with share: true', () => {
  it('the shared result rides the release: the waiter gets it and reads nothing after it', async () => {
    const [a, b] = [worker('wake:share:'), worker('wake:share:')];
    await Promise.all([a.client.ping(), b.client.ping()]);
    const key = a.lock.redisKey('nightly');
    const wake = await wakeUps(key);
    const waiter = await waiterOn(key);
    let runs = 0;
    const work = (): Promise<{ total: number }> => {
      runs++;
      return heardBuild({ total: 42 }, waiter)();
    };
    let answers: unknown[] = [];
    const seen = await watched(server, async () => {
      const first = a.engine.run('nightly', work, { share: true });
      await untilHeld(key);
      answers = await Promise.all([first, b.engine.run('nightly', work, { share: true })]);
    });
    wake.stop();
    expect(runs).toBe(1);
    expect(answers).toEqual([{ total: 42 }, { total: 42 }]);
    expect(wake.texts).toEqual(['=r{"total":42}']);
    expect(sentAfterRelease(seen, b.client)).toEqual([]);
  });

  it('a cache entry and a shared result of the same lock key are never taken for one another', async () => {
    // B's serializer takes any text for a value: only the wake-up's mark tells an entry apart.
    const anyText: ResultSerializer = { serialize: String, deserialize: (text) => text };
    const [a, b] = [worker('wake:mixed:'), worker('wake:mixed:', undefined, anyText)];
    // A's cache build holds the key's lock; B's shared run waits on it, hears the entry's
    // wake-up, which is no shared result, and runs itself once the lock is free.
    const key = a.lock.redisKey('mixed');
    const waiter = await waiterOn(key);
    const cached = a.cache.getOrSet('mixed', heardBuild('the entry', waiter), { ttl: 60 });
    await untilHeld(key);
    const shared = b.engine.run('mixed', slowBuild('the result'), { share: true });
    expect(await Promise.all([cached, shared])).toEqual(['the entry', 'the result']);
  });
});
