import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { releaseChannel } from '../../lib/redis/keys.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import {
  ReleaseSubscriber,
  releaseSubscriberFor,
} from '../../lib/single-flight/release-subscriber.js';
import { inHeapChild } from '../support/heap-child.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { startTcpProxy } from '../support/tcp-proxy.js';
import { pubsubClients as pubsubClientIds, sleep } from './support.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

/** Ids of the pub/sub connections the server sees now (CLIENT LIST TYPE pubsub). */
const pubsubIds = (): Promise<string[]> => pubsubClientIds(server.client());

async function until(check: () => Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((r) => setTimeout(r, 20));
}

describe('release subscriber: one lazy connection per process', () => {
  it('opens nothing until the first listener', async () => {
    const before = new Set(await pubsubIds());
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 0 });
    await sleep(50);
    expect((await pubsubIds()).filter((id) => !before.has(id))).toEqual([]);
    subscriber.close();
  });

  it('many waiting keys share one connection, made by duplicating the client', async () => {
    const client = server.client();
    const subscriber = new ReleaseSubscriber(client, { idleMs: 0 });
    const before = new Set(await pubsubIds());
    const all = Array.from({ length: 50 }, (_, i) =>
      subscriber.listen(releaseChannel(`buffer:lock:share${i % 10}`), () => {}),
    );
    expect(await Promise.all(all.map((l) => l.ready))).toEqual(all.map(() => true));
    const channels = await server.client().call('PUBSUB', 'SHARDCHANNELS', '*share*');
    expect(channels).toHaveLength(10);
    const made = (await pubsubIds()).filter((id) => !before.has(id));
    expect(made).toHaveLength(1);
    for (const l of all) l.close();
    subscriber.close();
    await until(async () => !(await pubsubIds()).includes(made[0]!));
  });

  it('is dropped keepMs after nothing waits, and made again for the next waiter', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 0, keepMs: 0 });
    const before = new Set(await pubsubIds());
    const ours = async (): Promise<string[]> => (await pubsubIds()).filter((id) => !before.has(id));
    const a = subscriber.listen(releaseChannel('buffer:lock:drop'), () => {});
    const b = subscriber.listen(releaseChannel('buffer:lock:drop'), () => {});
    await Promise.all([a.ready, b.ready]);
    const first = await ours();
    expect(first).toHaveLength(1);
    a.close();
    await sleep(50);
    expect(await ours()).toEqual(first); // b still waits
    b.close();
    await until(async () => (await ours()).length === 0);
    const c = subscriber.listen(releaseChannel('buffer:lock:drop'), () => {});
    expect(await c.ready).toBe(true);
    const second = await ours();
    expect(second).toHaveLength(1);
    expect(second).not.toEqual(first); // a new connection
    c.close();
    await until(async () => (await ours()).length === 0);
  });

  it('stays open for idleMs after the last waiter, so back-to-back flights reuse it', async () => {
    const before = new Set(await pubsubIds());
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 60_000 });
    const a = subscriber.listen(releaseChannel('buffer:lock:idle'), () => {});
    await a.ready;
    const first = (await pubsubIds()).filter((id) => !before.has(id));
    a.close();
    const b = subscriber.listen(releaseChannel('buffer:lock:idle'), () => {});
    await b.ready;
    expect((await pubsubIds()).filter((id) => !before.has(id))).toEqual(first);
    expect(first).toHaveLength(1);
    b.close();
    subscriber.close();
    await until(async () => !(await pubsubIds()).includes(first[0]!));
  });

  it('keeps a channel subscribed for idleMs after its last waiter: the next wait on the key sends no SSUBSCRIBE', async () => {
    const stats = server.client();
    const ssubscribes = async (): Promise<number> =>
      Number(/cmdstat_ssubscribe:calls=(\d+)/.exec(await stats.info('commandstats'))?.[1] ?? 0);
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 60_000 });
    const a = subscriber.listen(releaseChannel('buffer:lock:linger'), () => {});
    await a.ready;
    a.close();
    const before = await ssubscribes();
    const b = subscriber.listen(releaseChannel('buffer:lock:linger'), () => {});
    expect(await b.ready).toBe(true);
    expect(await ssubscribes()).toBe(before);
    b.close();
    subscriber.close();
  });

  it('ends an idle channel subscription after idleMs while another key is still waited on', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 100 });
    const kept = subscriber.listen(releaseChannel('buffer:lock:ending:kept'), () => {});
    const idle = subscriber.listen(releaseChannel('buffer:lock:ending:idle'), () => {});
    await Promise.all([kept.ready, idle.ready]);
    const channels = (): Promise<unknown> =>
      server.client().call('PUBSUB', 'SHARDCHANNELS', 'buffer:lock:ending:*');
    idle.close();
    expect(((await channels()) as string[]).toSorted()).toEqual([
      'buffer:lock:ending:idle',
      'buffer:lock:ending:kept',
    ]);
    await until(async () => ((await channels()) as string[]).length === 1);
    expect(await channels()).toEqual(['buffer:lock:ending:kept']);
    kept.close();
    subscriber.close();
  });

  it('keeps at most 1000 channels subscribed with no waiter: beyond, the oldest is ended at once', async () => {
    const subscriber = new ReleaseSubscriber(server.client(), { idleMs: 60_000 });
    const kept = subscriber.listen(releaseChannel('buffer:lock:bound-kept'), () => {});
    await kept.ready;
    for (let i = 0; i < 1100; i++) {
      const one = subscriber.listen(releaseChannel(`buffer:lock:bound:${i}`), () => {});
      await one.ready;
      one.close();
    }
    const count = async (): Promise<number> =>
      ((await server.client().call('PUBSUB', 'SHARDCHANNELS', 'buffer:lock:bound*')) as string[])
        .length;
    await until(async () => (await count()) === 1001);
    const left = (await server
      .client()
      .call('PUBSUB', 'SHARDCHANNELS', 'buffer:lock:bound:*')) as string[];
    expect(left).not.toContain('buffer:lock:bound:0');
    expect(left).toContain('buffer:lock:bound:1099');
    kept.close();
    subscriber.close();
  });

  it('outlives its last subscription by keepMs: the next stampede finds it open, with no handshake', async () => {
    // A server of its own: connections of other tests (reconnecting, say) would come and go here.
    const own = await startRedis();
    try {
      const admin = own.client();
      // Every connection the server has now, not only pub/sub ones: one with no channel left is none.
      const ids = async (): Promise<string[]> =>
        [...String(await admin.client('LIST')).matchAll(/\bid=(\d+)/g)].map((m) => m[1]!);
      const channels = (): Promise<unknown> =>
        admin.call('PUBSUB', 'SHARDCHANNELS', 'buffer:lock:kept-open');
      const subscriber = new ReleaseSubscriber(own.client(), { idleMs: 0, keepMs: 60_000 });
      const a = subscriber.listen(releaseChannel('buffer:lock:kept-open'), () => {});
      await a.ready;
      const first = await ids();
      a.close();
      await until(async () => ((await channels()) as string[]).length === 0);
      // The channel is ended; the connection stays, and the next waiter subscribes on it.
      expect(await ids()).toEqual(first);
      const b = subscriber.listen(releaseChannel('buffer:lock:kept-open'), () => {});
      expect(await b.ready).toBe(true);
      expect(await ids()).toEqual(first);
      b.close();
      subscriber.close();
      await until(async () => (await ids()).length === first.length - 1);
      admin.disconnect();
    } finally {
      await own.stop();
    }
  });

  it('never keeps the process alive: a process whose own client has quit exits with it open', async () => {
    // The child waits on a lock (so its subscriber connects), quits its client and ends on its
    // own while the subscriber is kept open for 60 s: a socket that held the process would keep
    // it past this test's time.
    const own = await startRedis();
    const result = await inHeapChild<{ woken: boolean; open: number }>(
      `
import { Redis } from 'ioredis';
import { RedisLockService, SingleFlightEngine } from './dist/index.js';
const client = new Redis(Number(process.env.PORT));
const lock = new RedisLockService({ redis: client, namespace: 'unref:' });
const engine = new SingleFlightEngine({ lock });
const [guard] = await lock.acquire('k');
const waited = engine.run('k', () => 'ran');
await new Promise((r) => setTimeout(r, 100));
await lock.release(guard);
const woken = (await waited) === 'ran';
const open = String(await client.client('LIST', 'TYPE', 'pubsub')).match(/id=/g).length;
await client.quit();
console.log(JSON.stringify({ woken, open }));
`,
      { PORT: String(own.port) },
    ).finally(() => own.stop());
    // Its one pub/sub connection was open when its client quit.
    expect(result).toEqual({ woken: true, open: 1 });
  }, 20_000);

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

/**
 * A client of a user that may run everything but SSUBSCRIBE, as an ACL can set up (Redis 6, which
 * has no SSUBSCRIBE at all, refuses it the same way).
 */
async function refusedClient(user: string): Promise<Redis> {
  await server
    .client()
    .call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all', '-ssubscribe');
  return server.client({ username: user, password: 'pw' });
}

/** SSUBSCRIBEs the server refused so far (INFO commandstats). */
async function refusedSubscribes(): Promise<number> {
  const info = String(await server.client().info('commandstats'));
  return Number(/^cmdstat_ssubscribe:.*rejected_calls=(\d+)/m.exec(info)?.[1] ?? 0);
}

describe('release subscriber: a client whose duplicate() gives no connection', () => {
  it.each([
    ['a rejected promise', () => Promise.reject(new Error('no duplicate'))],
    ['a number', () => 7],
  ])(
    'duplicate() answering %s: ready resolves false, reported, nothing left unhandled',
    async (_n, duplicate) => {
      const escaped: unknown[] = [];
      const record = (error: unknown): void => void escaped.push(error);
      process.on('unhandledRejection', record);
      try {
        const errors: Error[] = [];
        const client = { eval: () => Promise.resolve(1), duplicate };
        const subscriber = new ReleaseSubscriber(client as never, {
          idleMs: 0,
          onError: (error) => errors.push(error),
        });
        const listener = subscriber.listen(releaseChannel('buffer:lock:noduplicate'), () => {});
        expect(await listener.ready).toBe(false);
        expect(errors).toHaveLength(1);
        listener.close();
        await new Promise((r) => setTimeout(r, 50));
        expect(escaped).toEqual([]);
      } finally {
        process.off('unhandledRejection', record);
      }
    },
  );
});

describe('release subscriber: a refused subscription makes it unusable, reported once', () => {
  it('many waiters on many keys: one error for the owner and each waiter, and every waiter is woken', async () => {
    const client = await refusedClient('nosub-once');
    const owner: Error[] = [];
    const subscriber = new ReleaseSubscriber(client, { idleMs: 0, onError: (e) => owner.push(e) });
    expect(subscriber.usable).toBe(true);
    const heard: Error[] = [];
    let woken = 0;
    const all = Array.from({ length: 10 }, (_, i) =>
      subscriber.listen(
        releaseChannel(`buffer:lock:refused${i % 5}`),
        () => woken++,
        (e) => heard.push(e),
      ),
    );
    expect(await Promise.all(all.map((l) => l.ready))).toEqual(all.map(() => false));
    expect(owner).toHaveLength(1);
    expect(owner[0]!.message).toMatch(/NOPERM/);
    // Each waiter hears of the same failure: a strategy tells its owner once.
    expect(heard).toHaveLength(10);
    expect(new Set(heard)).toEqual(new Set(owner));
    expect(woken).toBeGreaterThanOrEqual(10);
    expect(subscriber.usable).toBe(false);
    for (const l of all) l.close();
    subscriber.close();
  });

  it('sends no SSUBSCRIBE during the cool-down, and one retry after it', async () => {
    const client = await refusedClient('nosub-retry');
    const owner: Error[] = [];
    const subscriber = new ReleaseSubscriber(client, {
      idleMs: 0,
      retryMs: 300,
      onError: (e) => owner.push(e),
    });
    const first = subscriber.listen(releaseChannel('buffer:lock:retry'), () => {});
    expect(await first.ready).toBe(false);
    first.close();
    const refused = await refusedSubscribes();
    const during = Array.from({ length: 5 }, (_, i) =>
      subscriber.listen(releaseChannel(`buffer:lock:retry${i}`), () => {}),
    );
    expect(await Promise.all(during.map((l) => l.ready))).toEqual(during.map(() => false));
    expect(await refusedSubscribes()).toBe(refused);
    expect(owner).toHaveLength(1);
    for (const l of during) l.close();
    await new Promise((r) => setTimeout(r, 350));
    const after = subscriber.listen(releaseChannel('buffer:lock:retry'), () => {});
    expect(await after.ready).toBe(false);
    expect(await refusedSubscribes()).toBe(refused + 1);
    expect(owner).toHaveLength(2);
    after.close();
    subscriber.close();
  });

  it('is usable again once a retry is confirmed, and a release then wakes its waiter', async () => {
    const client = await refusedClient('nosub-heal');
    const lock = new RedisLockService({ redis: client, namespace: 'rs:heal:' });
    const subscriber = new ReleaseSubscriber(client, { idleMs: 0, retryMs: 100 });
    const [guard] = await lock.acquire('k', 30);
    const refused = subscriber.listen(releaseChannel(guard!.key), () => {});
    expect(await refused.ready).toBe(false);
    refused.close();
    await server.client().call('ACL', 'SETUSER', 'nosub-heal', '+ssubscribe');
    await new Promise((r) => setTimeout(r, 150));
    let woke!: () => void;
    const released = new Promise<void>((r) => (woke = r));
    const listening = subscriber.listen(releaseChannel(guard!.key), () => woke());
    expect(await listening.ready).toBe(true);
    expect(subscriber.usable).toBe(true);
    await lock.release(guard!);
    await released;
    listening.close();
    subscriber.close();
  });
});

describe('release subscriber: a lost connection makes it unusable until it subscribes again', () => {
  it('wakes every waiter when its connection is killed, and renews the subscription after the cool-down', async () => {
    const own = await startRedis();
    const subscriber = new ReleaseSubscriber(own.client(), { idleMs: 0, retryMs: 100 });
    let woken = 0;
    const listening = subscriber.listen(releaseChannel('buffer:lock:killed'), () => woken++);
    expect(await listening.ready).toBe(true);
    await own.client().call('CLIENT', 'KILL', 'TYPE', 'pubsub');
    await until(async () => !subscriber.usable);
    expect(woken).toBe(1);
    listening.close();
    await new Promise((r) => setTimeout(r, 150));
    const again = subscriber.listen(releaseChannel('buffer:lock:killed'), () => {});
    expect(await again.ready).toBe(true);
    expect(subscriber.usable).toBe(true);
    again.close();
    subscriber.close();
    await own.stop();
  });
});

/** PINGs the server ran so far (INFO commandstats). */
const pings = async (admin: Redis): Promise<number> =>
  Number(/^cmdstat_ping:calls=(\d+)/m.exec(String(await admin.info('commandstats')))?.[1] ?? 0);

describe('release subscriber: a silent connection is found by its own PING', () => {
  it('asks for a PING each 400 ms while a subscription is confirmed, and none once closed', async () => {
    const own = await startRedis();
    try {
      const admin = own.client();
      const subscriber = new ReleaseSubscriber(own.client(), { idleMs: 60_000 });
      const listening = subscriber.listen(releaseChannel('buffer:lock:probed'), () => {});
      expect(await listening.ready).toBe(true);
      const before = await pings(admin);
      await sleep(1000);
      const during = (await pings(admin)) - before;
      expect(during).toBeGreaterThanOrEqual(2);
      expect(during).toBeLessThanOrEqual(3);
      listening.close();
      subscriber.close();
      const closed = await pings(admin);
      await sleep(1000);
      expect(await pings(admin)).toBe(closed);
    } finally {
      await own.stop();
    }
  });

  it('a connection that answers nothing (no error, no close) wakes every waiter within 1 s, and is replaced', async () => {
    const own = await startRedis();
    const proxy = await startTcpProxy(own.port);
    const client = own.client({ port: proxy.port });
    try {
      const subscriber = new ReleaseSubscriber(client, { idleMs: 0, retryMs: 100 });
      let woken = 0;
      const listening = subscriber.listen(releaseChannel('buffer:lock:silent'), () => woken++);
      expect(await listening.ready).toBe(true);
      const silentAt = Date.now();
      proxy.setMode({ kind: 'blackhole' });
      await until(async () => woken > 0);
      const heardMs = Date.now() - silentAt;
      console.log(`a silent subscriber connection woke its waiter after ${heardMs} ms`);
      expect(heardMs).toBeLessThan(1000);
      expect(subscriber.usable).toBe(false);
      listening.close();
      proxy.setMode({ kind: 'pass' });
      await sleep(150);
      const before = await pubsubClientIds(own.client());
      const again = subscriber.listen(releaseChannel('buffer:lock:silent'), () => {});
      expect(await again.ready).toBe(true);
      expect(subscriber.usable).toBe(true);
      // On a connection of its own: the silent one was let go.
      const after = await pubsubClientIds(own.client());
      expect(after.filter((id) => !before.includes(id))).toHaveLength(1);
      again.close();
      subscriber.close();
    } finally {
      client.disconnect();
      await proxy.close();
      await own.stop();
    }
  });
});
