import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
} from '../../lib/index.js';
import { addressOf, watched } from '../support/command-stats.js';
import type { MonitoredCommand } from '../support/monitor.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * On the built-in store a miss's lookup takes the key's lock in the same script when no entry is
 * there: the worker that builds sends one command before its factory runs, and a worker that finds
 * the lock taken waits without trying it. Two workers are two services on clients of their own.
 */

const silent = { log() {}, warn() {}, error() {} };

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

function worker(
  namespace: string,
  fencing = false,
): { client: Redis; lock: RedisLockService; cache: BufferCache } {
  const client = server.client();
  const lock = new RedisLockService({ redis: client, namespace, fencing });
  const cache = new BufferCache({ lock, options: { logger: silent } });
  return { client, lock, cache };
}

/** The names of the commands `client` sent while `during` ran, in order (MONITOR). */
async function sentBy(client: Redis, during: () => Promise<void>): Promise<string[]> {
  const seen = await watched(server, during);
  const address = addressOf(client);
  return seen.flatMap((c) => (c.source === address ? [c.args[0]!.toLowerCase()] : []));
}

describe('a miss takes the lock in its lookup', () => {
  it('the building worker sends one script before its factory runs, and then only its release', async () => {
    const a = worker('claim:one:');
    // Loads the scripts, so that no NOSCRIPT retry is counted below.
    await a.cache.getOrSet('warm', () => 'w');
    // The factory marks its start with a command of another client, in MONITOR's order.
    const marker = server.client();
    await marker.ping();
    const seen = await watched(server, async () => {
      const value = await a.cache.getOrSet('cold', async () => {
        await marker.echo('factory runs');
        return 'built';
      });
      expect(value).toBe('built');
    });
    const address = addressOf(a.client);
    const names = (commands: readonly MonitoredCommand[]): string[] =>
      commands.flatMap((c) => (c.source === address ? [c.args[0]!.toLowerCase()] : []));
    const runs = seen.findIndex((c) => c.args[0]?.toLowerCase() === 'echo');
    expect(runs).toBeGreaterThan(-1);
    expect(names(seen.slice(0, runs))).toEqual(['evalsha']);
    expect(names(seen.slice(runs))).toEqual(['evalsha']);
    marker.disconnect();
    expect(await a.cache.get('cold')).toBe('built');
    expect(await a.client.exists(a.lock.redisKey('cold'))).toBe(0);
  });

  it('with fencing on, the lock a lookup takes carries its fencing number to the build', async () => {
    const a = worker('claim:fenced:', true);
    await a.cache.getOrSet('warm', () => 'w');
    let fence: number | undefined;
    const sent = await sentBy(a.client, async () => {
      await a.cache.getOrSet('fenced', () => {
        fence = SingleFlight.fence();
        return 'built';
      });
    });
    expect(sent).toEqual(['evalsha', 'evalsha']);
    // A fencing number is the server's clock in µs, or above it.
    expect(fence).toBeGreaterThan(1e15);
    expect(await a.client.exists(a.lock.redisKey('fenced'))).toBe(0);
    const [guard] = await a.lock.acquire('fenced');
    expect(guard!.fence).toBeGreaterThan(fence!);
    await a.lock.release(guard!);
  });

  it('a worker whose lookup finds the lock taken waits for its release without trying it', async () => {
    const [a, b] = [worker('claim:two:'), worker('claim:two:')];
    await Promise.all([a.cache.getOrSet('warm', () => 'w'), b.cache.get('warm')]);
    const [guard] = await a.lock.acquire('busy');
    let answer: unknown;
    const sent = await sentBy(b.client, async () => {
      const waiting = b.cache.getOrSet('busy', () => 'built by b');
      await new Promise((r) => setTimeout(r, 50));
      await a.cache.set('busy', 'set by a');
      await a.lock.release(guard!);
      answer = await waiting;
    });
    expect(answer).toBe('set by a');
    expect(sent).not.toContain('set');
  });

  it('with the breaker open, a miss whose lookup took the lock builds under it, and the breaker closes', async () => {
    const client = server.client({ commandTimeout: 150, maxRetriesPerRequest: 0 });
    const lock = new RedisLockService({ redis: client, namespace: 'claim:breaker:' });
    const circuitBreaker = { failureThreshold: 1, openSeconds: 60 };
    const engine = new SingleFlightEngine({ lock, options: { logger: silent, circuitBreaker } });
    const cache = new BufferCache({ lock, engine, options: { logger: silent } });
    await cache.getOrSet('warm', () => 'w');
    server.pause();
    try {
      // The acquire times out: the run goes on without the lock, and the breaker opens.
      expect(await engine.run('during the pause', () => 'ran')).toBe('ran');
    } finally {
      server.resume();
    }
    expect(engine.breaker?.state).toBe('open');
    const lockKey = lock.redisKey('report');
    const value = await cache.getOrSet('report', async () => server.client().exists(lockKey), {
      ttl: 60,
    });
    // The factory saw its lock in Redis: the lookup took it, breaker or not.
    expect(value).toBe(1);
    expect(engine.breaker?.state).toBe('closed');
  });

  it('a lock taken by a lookup while this process already waits for the key is let go at once', async () => {
    const [a, other] = [worker('claim:join:'), worker('claim:join:')];
    const lockKey = a.lock.redisKey('joined');
    const [held] = await other.lock.acquire('joined', 60);
    let builds = 0;
    const build = (by: string) => async (): Promise<string> => {
      builds++;
      return by;
    };
    // The first call waits for the other holder; lockTimeout is long, so only a release wakes it.
    const first = a.cache.getOrSet('joined', build('first'), { lockTimeout: 60 });
    await new Promise((r) => setTimeout(r, 50));
    // The holder's lock goes with no wake-up: the next lookup finds it free and takes it.
    expect(await a.client.del(held!.key)).toBe(1);
    // Other options: the second call makes a lookup of its own (with the same ones it would take
    // the first's outcome), joins the first's flight, and lets its own lock go, which wakes it.
    const second = a.cache.getOrSet('joined', build('second'), { lockTimeout: 59 });
    expect(await Promise.all([first, second])).toEqual(['first', 'first']);
    expect(builds).toBe(1);
    expect(await a.client.exists(lockKey)).toBe(0);
  }, 10_000);
});
