import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { releaseChannel } from '../../lib/redis/keys.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { ReleaseWait } from '../../lib/single-flight/release-wait.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
} from '../../lib/single-flight/release-subscriber.js';
import { SingleFlightEngine } from '../../lib/single-flight/single-flight.engine.js';
import type { RedisScriptClient } from '../../lib/index.js';
import { deferred, MemoryLogger, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { pubsubClients, shardSubscribers, sleep } from './support.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const LONG = 60; // seconds: a TTL or deadline no test run reaches, so only the event under test wakes

/** A waiter on `client`, its subscriber made with `options`; told failures go to `onError`. */
function waiterOn(
  client: RedisScriptClient,
  options: Parameters<typeof releaseSubscriberFor>[1] = { idleMs: 0 },
  onError: (error: Error) => void = () => {},
): ReleaseWait {
  releaseSubscriberFor(client as unknown as DuplicableClient, options);
  return new ReleaseWait(async () => client, onError);
}

function setup(namespace: string) {
  const client = server.client();
  const lock = new RedisLockService({ redis: client, namespace });
  return { client, lock, strategy: waiterOn(client) };
}

/** Resolves once Redis counts `n` SSUBSCRIBErs on the lock's release channel. */
async function subscribers(lockKey: string, n: number): Promise<void> {
  while ((await shardSubscribers(server.client(), releaseChannel(lockKey))) !== n) await sleep(10);
}

describe('pub/sub wait: released → waiters wake', () => {
  it('every waiter resolves on the holder’s release, while the lock still had most of its TTL', async () => {
    const { lock, strategy } = setup('pw:wake:');
    const before = await pubsubClients(server.client());
    const [guard] = await lock.acquire('k', LONG);
    const order: string[] = [];
    const waiters = Array.from({ length: 20 }, (_, i) =>
      strategy
        .waitForRelease(guard!.key, Date.now() + LONG * 1000)
        .then(() => order.push(`waiter${i}`)),
    );
    await subscribers(guard!.key, 1); // 20 waiters, one subscription
    expect(await pubsubClients(server.client())).toHaveLength(before.length + 1);
    order.push('release');
    await lock.release(guard!);
    await Promise.all(waiters);
    expect(order[0]).toBe('release');
    expect(order).toHaveLength(21);
    // Woken by the message, not by a backstop: nothing else was due for a minute.
    await subscribers(guard!.key, 0);
  });
});

describe('pub/sub wait: free already → resolves at once', () => {
  it('a lock released between the failed acquire and the subscribe is seen through PTTL', async () => {
    const { lock, strategy } = setup('pw:free:');
    const [guard] = await lock.acquire('k', LONG);
    await lock.release(guard!); // before anyone listens: this message is lost for the waiter
    await strategy.waitForRelease(guard!.key, Date.now() + LONG * 1000);
    expect(await lock.acquire('k')).toEqual([
      expect.objectContaining({ key: guard!.key }),
      undefined,
    ]);
  });
});

describe('pub/sub wait: expired (crashed holder, no message) → backstop', () => {
  it('resolves after the key expired, never before', async () => {
    const { client, strategy } = setup('pw:crash:');
    const key = 'pw:crash:dead-holder';
    await client.set(key, 'token-of-a-crashed-process', 'PX', 300);
    await strategy.waitForRelease(key, Date.now() + LONG * 1000);
    expect(await client.exists(key)).toBe(0);
  });

  it('a holder that extended its lock is waited for again, up to its new expiry', async () => {
    const { client, strategy } = setup('pw:ext:');
    const key = 'pw:ext:holder';
    await client.set(key, 'tok', 'PX', 300);
    const extended = client.pexpire(key, 600);
    await strategy.waitForRelease(key, Date.now() + LONG * 1000);
    await extended;
    // The waiter read the PTTL after the extension or before it: either way it woke after an expiry
    // it was told of; a second wait covers the rest, as the engine's loop does.
    if ((await client.exists(key)) === 1)
      await strategy.waitForRelease(key, Date.now() + LONG * 1000);
    expect(await client.exists(key)).toBe(0);
  });
});

describe('pub/sub wait: deadline and abort', () => {
  it('resolves at the deadline while the lock is still held', async () => {
    const { lock, strategy } = setup('pw:deadline:');
    const [guard] = await lock.acquire('k', LONG);
    await strategy.waitForRelease(guard!.key, Date.now() + 150);
    expect(await server.client().get(guard!.key)).toBe(guard!.token);
  });
});

describe('pub/sub wait: Redis trouble → polling backstop, never a rejection', () => {
  it('resolves by the fallback poll when PTTL cannot be read', async () => {
    const own = await startRedis();
    const client = own.client({ maxRetriesPerRequest: 0, retryStrategy: () => null });
    await client.ping();
    await own.stop();
    const strategy = waiterOn(client);
    await expect(
      strategy.waitForRelease('pw:down:k', Date.now() + LONG * 1000),
    ).resolves.toBeUndefined();
  });
});

describe('pub/sub wait: the client the lock service makes lazily', () => {
  it('works with () => lock.getClient() and the process’s default subscriber', async () => {
    let made = 0;
    const lock = new RedisLockService({
      redis: () => (made++, server.client()),
      namespace: 'pw:lazy:',
    });
    const strategy = new ReleaseWait(
      () => lock.getClient(),
      () => {},
    );
    const before = await pubsubClients(server.client());
    const [guard] = await lock.acquire('k', LONG);
    const waiting = strategy.waitForRelease(guard!.key, Date.now() + LONG * 1000);
    await subscribers(guard!.key, 1);
    expect(await pubsubClients(server.client())).toHaveLength(before.length + 1);
    await lock.release(guard!);
    await waiting;
    expect(made).toBe(1); // the waiter used the service's one client, not a new one
    strategy.close();
    await until(async () => (await pubsubClients(server.client())).length === before.length);
  });

  it('getClient() rejects with redis_no_client when the factory gives none; the wait still resolves', async () => {
    const lock = new RedisLockService({ redis: () => undefined, namespace: 'pw:none:' });
    await expect(lock.getClient()).rejects.toMatchObject({ code: 'redis_no_client' });
    const strategy = new ReleaseWait(
      () => lock.getClient(),
      () => {},
    );
    await expect(
      strategy.waitForRelease('pw:none:k', Date.now() + LONG * 1000),
    ).resolves.toBeUndefined();
  });

  it('a client without duplicate() cannot subscribe: the waiter polls instead of waiting out the lock', async () => {
    const real = server.client();
    const evalOnly = {
      eval: (...args: Parameters<typeof real.eval>) => real.eval(...args),
    };
    const errors: Error[] = [];
    const told: Error[] = [];
    const strategy = waiterOn(evalOnly, { idleMs: 0, onError: (e) => errors.push(e) }, (e) =>
      told.push(e),
    );
    await real.set('pw:nodup:k', 'tok', 'PX', LONG * 1000);
    await strategy.waitForRelease('pw:nodup:k', Date.now() + LONG * 1000);
    await strategy.waitForRelease('pw:nodup:k', Date.now() + LONG * 1000);
    expect(await real.exists('pw:nodup:k')).toBe(1);
    expect(errors).toHaveLength(1);
    expect(told).toEqual(errors);
  });
});

describe('pub/sub wait: a refused subscription → prompt polling', () => {
  it('a waiter whose subscription is refused polls and resumes soon after the release', async () => {
    const admin = server.client();
    await admin.call('ACL', 'SETUSER', 'nosub', 'on', '>pw', '~*', '&*', '+@all', '-ssubscribe');
    const client = server.client({ username: 'nosub', password: 'pw' });
    const lock = new RedisLockService({ redis: client, namespace: 'pw:acl:' });
    const told: Error[] = [];
    const strategy = waiterOn(client, { idleMs: 0 }, (e) => told.push(e));
    const [guard] = await lock.acquire('k', 30); // the holder's lock outlives the waiter's deadline
    const started = Date.now();
    const deadline = started + 10_000;
    const order: string[] = [];
    let waits = 0;
    const waiter = (async () => {
      for (;;) {
        const [mine] = await lock.acquire('k', 30);
        if (mine) return order.push('acquired');
        if (Date.now() >= deadline) return order.push('deadline');
        waits++;
        await strategy.waitForRelease(guard!.key, deadline);
      }
    })();
    await sleep(200);
    order.push('released');
    await lock.release(guard!);
    await waiter;
    expect(order).toEqual(['released', 'acquired']);
    expect(Date.now() - started).toBeLessThan(2000);
    // It tried again several times while the holder ran, and heard of the refusal once.
    expect(waits).toBeGreaterThan(1);
    expect(told).toHaveLength(1);
    expect(told[0]!.message).toMatch(/NOPERM/);
  });
});

describe('a Redis without SSUBSCRIBE → the engine polls', () => {
  it('the waiting worker runs right after the holder, never beside it, and nothing listens', async () => {
    const own = await startRedis(['--rename-command', 'SSUBSCRIBE', '']);
    try {
      const logger = new MemoryLogger();
      const locks = [0, 1].map(
        () => new RedisLockService({ redis: own.client(), namespace: 'pw:poll:', ttl: 60 }),
      );
      const [a, b] = locks.map(
        (lock) => new SingleFlightEngine({ lock, options: { lockTimeout: 30, logger } }),
      );
      const order: string[] = [];
      const holding = deferred();
      const started = deferred();
      const first = a!.run('polled', async () => {
        order.push('a');
        started.resolve();
        await holding.promise;
        return 1;
      });
      await started.promise;
      const second = b!.run('polled', async () => {
        order.push('b');
        return 2;
      });
      await sleep(40);
      // No one listens: the release reaches no subscriber.
      const channel = releaseChannel(locks[0]!.redisKey('polled'));
      expect(await shardSubscribers(own.client(), channel)).toBe(0);
      holding.resolve();
      expect(await Promise.all([first, second])).toEqual([1, 2]);
      expect(order).toEqual(['a', 'b']);
      a!.close();
      b!.close();
    } finally {
      await own.stop();
    }
  });
});
