import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectFailFast, FAIL_FAST_CLIENT_DEFAULTS } from '../../lib/redis/client-defaults.js';
import { RedisLockService } from '../../lib/lock/redis-lock.service.js';
import { freePort, startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

/** Resolves 'rejected' or 'still pending' — whichever comes first: an ordering, not a speed test. */
async function settlesBefore(promise: Promise<unknown>, guardMs: number): Promise<string> {
  let timer: NodeJS.Timeout | undefined;
  const guard = new Promise<string>((r) => (timer = setTimeout(() => r('still pending'), guardMs)));
  const outcome = promise.then(
    () => 'resolved',
    () => 'rejected',
  );
  const first = await Promise.race([outcome, guard]);
  clearTimeout(timer);
  return first;
}

describe('client defaults: the fail-fast settings', () => {
  it('connectFailFast applies them, lets the caller override, and is ready at once', async () => {
    const client = await connectFailFast(server.url, { commandTimeout: 300 });
    try {
      expect(client.status).toBe('ready');
      expect(client.options).toMatchObject({ ...FAIL_FAST_CLIENT_DEFAULTS, commandTimeout: 300 });
      expect(await client.ping()).toBe('PONG'); // no offline queue, yet the first command works
      const options = await connectFailFast({ port: server.port, host: '127.0.0.1' });
      expect(options.options).toMatchObject(FAIL_FAST_CLIENT_DEFAULTS);
      options.disconnect();
    } finally {
      client.disconnect();
    }
  });
});

describe('client defaults: Redis in trouble → callers get an error, not a hang', () => {
  it('paused (SIGSTOP): a lock call fails by the command timeout', async () => {
    const own = await startRedis();
    const client = await connectFailFast(own.url, { commandTimeout: 200 });
    const lock = new RedisLockService({ redis: client, namespace: 'cd:pause:' });
    own.pause();
    try {
      const call = lock.acquire('k');
      // Without commandTimeout the call would hang for as long as the server is stopped.
      expect(await settlesBefore(call, 20_000)).toBe('resolved');
      expect((await call)[1]?.code).toBe('redis_lock_failed');
      expect((await call)[1]?.message).toMatch(/timed out/i);
    } finally {
      own.resume();
      client.disconnect();
      await own.stop();
    }
  });

  it('gone (connection lost): commands fail at once instead of queueing', async () => {
    const own = await startRedis();
    const client = await connectFailFast(own.url);
    await own.stop();
    while (client.status === 'ready') await new Promise((r) => setTimeout(r, 10));
    expect(await settlesBefore(client.ping(), 20_000)).toBe('rejected');
    await expect(client.ping()).rejects.toThrow(/enableOfflineQueue|writeable|Connection/i);
    client.disconnect();
  });

  it('nothing listening: connectFailFast rejects and leaves no client reconnecting', async () => {
    const port = await freePort();
    const connecting = connectFailFast(`redis://127.0.0.1:${port}`);
    expect(await settlesBefore(connecting, 20_000)).toBe('rejected');
  });
});
