import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

/** The fault tests' TCP proxy, each mode seen by an ioredis client through it. */

let server: RedisServer;
let proxy: TcpProxy;
let client: Redis;
beforeAll(async () => {
  server = await startRedis();
  proxy = await startTcpProxy(server.port);
  client = new Redis(proxy.url, { commandTimeout: 300, maxRetriesPerRequest: 1 });
  client.on('error', () => {});
});
afterAll(async () => {
  client.disconnect();
  await proxy.close();
  await server.stop();
});

describe('TcpProxy', () => {
  it('pass forwards both ways; delay holds every chunk back, in order', async () => {
    expect(await client.ping()).toBe('PONG');
    proxy.setMode({ kind: 'delay', ms: 100 });
    const started = Date.now();
    const replies = await Promise.all([client.incr('n'), client.incr('n'), client.get('n')]);
    expect(replies).toEqual([1, 2, '2']);
    expect(Date.now() - started).toBeGreaterThanOrEqual(190); // both ways
    proxy.setMode({ kind: 'pass' });
  });

  it('blackhole: no error and no close, only silence; what was held back arrives afterwards', async () => {
    proxy.setMode({ kind: 'blackhole' });
    await expect(client.set('held', 'sent in the blackhole')).rejects.toThrow(/timed out/);
    expect(proxy.connections).toBe(1);
    expect(client.status).toBe('ready');
    proxy.setMode({ kind: 'pass' });
    expect(await client.get('held')).toBe('sent in the blackhole');
  });

  it('cut: every socket closes, and new connections are closed until traffic passes again', async () => {
    const closed = new Promise((resolve) => client.once('close', resolve));
    proxy.setMode({ kind: 'cut' });
    await closed;
    expect(proxy.connections).toBe(0);
    const other = new Redis(proxy.url, { retryStrategy: () => null, maxRetriesPerRequest: 0 });
    other.on('error', () => {});
    await expect(other.ping()).rejects.toThrow();
    other.disconnect();
    proxy.setMode({ kind: 'pass' });
    await new Promise((resolve) => client.once('ready', resolve));
    expect(await client.ping()).toBe('PONG');
  });
});
