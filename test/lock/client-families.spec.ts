import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { RedisLockService, type RedisScriptClient } from '../../lib/index.js';
import { withRedisServer } from './lock-helpers.js';
import type { RedisServer } from '../support/redis-server.js';
import { collectEscapes, settle } from '../support/escapes.js';

/**
 * Which clients the lock drives, and how: ioredis (and forks of it) with batching, a minimal
 * `eval()` client as it is, and anything else refused. Real Redis behind every working client.
 */

const NS = 'families:';
let server: RedisServer;
let admin: Redis;
withRedisServer((s, a) => ((server = s), (admin = a)));

const escaped = collectEscapes();

/** A client that sends every property it is asked for as a Redis command of that name. */
function dispatchingClient(real: Redis): RedisScriptClient {
  return new Proxy(
    {},
    {
      get:
        (_, name) =>
        (...args: (string | number)[]) =>
          real.call(String(name), ...args),
    },
  ) as RedisScriptClient;
}

describe('a client that sends every method name as a command', () => {
  it('5 concurrent acquires on it all take their locks, with nothing escaping', async () => {
    const lock = new RedisLockService({ redis: dispatchingClient(server.client()), namespace: NS });
    const results = await Promise.all(
      Array.from({ length: 5 }, (_, i) => lock.acquire(`dispatch-${i}`)),
    );
    for (const [guard, error] of results) {
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    }
    await settle();
    expect(escaped).toEqual([]);
  });

  it('returned by a factory, it is used as the client, not awaited as a promise', async () => {
    const lock = new RedisLockService({
      redis: () => dispatchingClient(server.client()),
      namespace: NS,
    });
    const results = await Promise.all(
      Array.from({ length: 5 }, (_, i) => lock.acquire(`factory-dispatch-${i}`)),
    );
    for (const [guard, error] of results) {
      expect(error).toBeUndefined();
      expect(await admin.get(guard!.key)).toBe(guard!.token);
      expect(await lock.release(guard!)).toEqual([true, undefined]);
    }
    await settle();
    expect(escaped).toEqual([]);
  });
});
