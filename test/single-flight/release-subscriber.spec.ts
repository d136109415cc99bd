import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { releaseChannel } from '../../lib/redis/keys.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import {
  ReleaseSubscriber,
  releaseSubscriberFor,
} from '../../lib/single-flight/release-subscriber.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

/** Pub/sub connections the server sees now (CLIENT LIST TYPE pubsub). */
async function pubsubClients(): Promise<number> {
  const list = String(await server.client().client('LIST', 'TYPE', 'PUBSUB'));
  return list.split('\n').filter((line) => line.trim() !== '').length;
}

async function until(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((r) => setTimeout(r, 20));
}

describe('release subscriber: one lazy connection per process', () => {
  it('opens nothing until the first listener', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 0 });
    expect(subscriber.connected).toBe(false);
    expect(subscriber.connectionCount).toBe(0);
  });

  it('many waiting keys share one connection, made by duplicating the client', async () => {
    const client = server.client();
    const subscriber = new ReleaseSubscriber(client, { idleMs: 0 });
    const before = await pubsubClients();
    const all = Array.from({ length: 50 }, (_, i) =>
      subscriber.listen(releaseChannel(`buffer:lock:share${i % 10}`), () => {}),
    );
    expect(await Promise.all(all.map((l) => l.ready))).toEqual(all.map(() => true));
    expect(subscriber.connectionCount).toBe(1);
    expect(subscriber.channelNames).toHaveLength(10);
    expect(await pubsubClients()).toBe(before + 1);
    for (const l of all) l.close();
  });

  it('is dropped when nothing waits, and made again for the next waiter', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 0 });
    const before = await pubsubClients();
    const a = subscriber.listen(releaseChannel('buffer:lock:drop'), () => {});
    const b = subscriber.listen(releaseChannel('buffer:lock:drop'), () => {});
    await Promise.all([a.ready, b.ready]);
    a.close();
    expect(subscriber.connected).toBe(true); // b still waits
    b.close();
    await until(async () => !subscriber.connected);
    await until(async () => (await pubsubClients()) === before);
    const c = subscriber.listen(releaseChannel('buffer:lock:drop'), () => {});
    expect(await c.ready).toBe(true);
    expect(subscriber.connectionCount).toBe(2);
    c.close();
  });

  it('stays open for idleMs after the last waiter, so back-to-back flights reuse it', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 60_000 });
    const a = subscriber.listen(releaseChannel('buffer:lock:idle'), () => {});
    await a.ready;
    a.close();
    const b = subscriber.listen(releaseChannel('buffer:lock:idle'), () => {});
    await b.ready;
    expect(subscriber.connectionCount).toBe(1);
    b.close();
    subscriber.close();
    expect(subscriber.connected).toBe(false);
  });

  it('releaseSubscriberFor gives one subscriber per client', () => {
    const one = server.client();
    const two = server.client();
    expect(releaseSubscriberFor(one)).toBe(releaseSubscriberFor(one));
    expect(releaseSubscriberFor(one)).not.toBe(releaseSubscriberFor(two));
  });
});

describe('release subscriber: a release wakes the listeners of that lock only', () => {
  it('calls every listener of the released key once, and none of another key', async () => {
    const client = server.client();
    const lock = new RedisLockService({ redis: client, namespace: 'rs:wake:' });
    const subscriber = new ReleaseSubscriber(client, { idleMs: 0 });
    const [guard] = await lock.acquire('a');
    const calls: string[] = [];
    let woke!: () => void;
    const done = new Promise<void>((r) => (woke = r));
    const listeners = [
      subscriber.listen(releaseChannel(guard!.key), () => calls.push('a1')),
      subscriber.listen(releaseChannel(guard!.key), () => {
        calls.push('a2');
        woke();
      }),
      subscriber.listen(releaseChannel(lock.redisKey('b')), () => calls.push('b')),
    ];
    await Promise.all(listeners.map((l) => l.ready));
    await lock.release(guard!);
    await done;
    expect(calls.toSorted()).toEqual(['a1', 'a2']);
    for (const l of listeners) l.close();
  });
});

describe('release subscriber: Redis trouble is never an error for a waiter', () => {
  it('ready resolves false and onError hears about it when Redis is gone', async () => {
    const own = await startRedis();
    const client = own.client({ maxRetriesPerRequest: 0, retryStrategy: () => null });
    await client.ping();
    await own.stop();
    const errors: Error[] = [];
    const subscriber = new ReleaseSubscriber(client, {
      idleMs: 0,
      onError: (e) => errors.push(e),
    });
    // The duplicate inherits "no retries": its SSUBSCRIBE fails instead of waiting forever.
    const listening = subscriber.listen(releaseChannel('buffer:lock:gone'), () => {});
    expect(await listening.ready).toBe(false);
    expect(errors.length).toBeGreaterThan(0);
    listening.close();
    subscriber.close();
  });
});
