import { Redis } from 'ioredis';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LockError, RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

const PASSWORD = 'hunter2-the-secret';

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
  await server.client().config('SET', 'requirepass', 'the-right-password');
});
afterAll(() => server.stop());

const withWrongPassword = (): Redis => {
  const client = new Redis(`redis://:${PASSWORD}@127.0.0.1:${server.port}`, {
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  client.on('error', () => {});
  return client;
};

const shows = (error: unknown): string => `${inspect(error, { depth: 20 })} ${String(error)}`;

describe('a Redis password never reaches an error', () => {
  it('an acquire refused for a wrong password says so, without the password in its cause chain', async () => {
    const client = withWrongPassword();
    const lock = new RedisLockService({ redis: client, namespace: 'secret:lock:' });
    const [guard, error] = await lock.acquire('report');
    expect(guard).toBeUndefined();
    expect(error).toBeInstanceOf(LockError);
    expect(error?.code).toBe('redis_lock_failed');
    expect(shows(error)).not.toContain(PASSWORD);
    client.disconnect();
  });

  it("a @SingleFlight run with onRedisError 'throw' fails with RedisUnavailableError, without the password", async () => {
    const client = withWrongPassword();
    const lock = new RedisLockService({ redis: client, namespace: 'secret:flight:' });
    const engine = new SingleFlightEngine({ lock, options: { onRedisError: 'throw' } });
    const thrown: unknown = await engine.run('report', () => 'built').catch((error) => error);
    expect((thrown as { code?: string }).code).toBe('redis_unavailable');
    expect(shows(thrown)).not.toContain(PASSWORD);
    await engine.close();
    client.disconnect();
  });
});
