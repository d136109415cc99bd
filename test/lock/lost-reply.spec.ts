import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectFailFast, RedisLockService } from '../../lib/index.js';
import { until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

/**
 * An acquire that reached Redis, whose reply was lost with the connection: the lock was taken
 * for nobody. The release of its token, sent behind it, cannot go out on the broken connection;
 * it goes out ahead of the lock's next command once the client is connected again, instead of
 * the key staying locked for its TTL.
 */

let server: RedisServer;
let proxy: TcpProxy;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  proxy = await startTcpProxy(server.port);
  admin = server.client();
});
afterAll(async () => {
  await proxy.close();
  await server.stop();
});

describe('acquire: the connection breaks between the script and its reply', () => {
  it('the lock taken for nobody is released ahead of the next acquire once the client is connected again, long before its TTL', async () => {
    const client = await connectFailFast({ host: '127.0.0.1', port: proxy.port });
    const lock = new RedisLockService({ redis: client, namespace: 'lost-reply:', ttl: 60 });
    const key = lock.redisKey('report');
    // Every chunk takes 150 ms each way: the script runs at +150 ms, its reply would arrive at +300.
    proxy.setMode({ kind: 'delay', ms: 150 });
    const acquiring = lock.acquire('report');
    await until(async () => (await admin.exists(key)) === 1, 2000);
    proxy.setMode({ kind: 'cut' }); // the reply is still in the proxy
    const [guard, error] = await acquiring;
    expect(guard).toBeUndefined();
    expect(error?.code).toBe('redis_lock_failed');
    expect(await admin.pttl(key)).toBeGreaterThan(50_000); // locked for nobody
    const ready = new Promise((resolve) => client.once('ready', resolve));
    proxy.setMode({ kind: 'pass' });
    await ready;
    // Nothing was sent in the background; the next acquire sends the release ahead of itself.
    expect(await admin.get(key)).not.toBeNull();
    const [again] = await lock.acquire('report');
    expect(again).toBeDefined();
    expect(await admin.get(key)).toBe(again!.token);
    await lock.release(again!);
    client.disconnect();
  });
});

describe('a client whose connection state cannot be read', () => {
  it('still locks and releases: its state reads as not connected, and no acquire rejects', async () => {
    const real = server.client();
    // Every method works on the real client; only reading `status` throws.
    const client = new Proxy(real, {
      get(target, property) {
        if (property === 'status') throw new Error('status is not readable');
        const value: unknown = Reflect.get(target, property, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
    const lock = new RedisLockService({ redis: client, namespace: 'unreadable-state:' });
    const [guard, error] = await lock.acquire('report');
    expect(error).toBeUndefined();
    expect(await admin.get(guard!.key)).toBe(guard!.token);
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    expect(await admin.exists(guard!.key)).toBe(0);
    real.disconnect();
  });
});
