import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { RedisScriptClient } from '../../lib/index.js';
import { afterAll, beforeAll } from 'vitest';
import { RedisLockService, type RedisLockOptions } from '../../lib/index.js';
import type { ClientFamily, KeyInspector } from '../support/client-families.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/** The Redis key the service locks for `key`: namespace, then hex MD5 of the key's UTF-8 bytes. */
export const rkey = (namespace: string, key: string): string =>
  namespace + createHash('md5').update(Buffer.from(key, 'utf8')).digest('hex');

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One call the service made on a client: the method and its arguments. */
export interface ClientCall {
  readonly method: 'eval' | 'evalsha';
  readonly args: readonly unknown[];
}

/**
 * A client object that passes every call on to a real ioredis client and records it, so a test
 * can see what the service sent (e.g. the PX milliseconds) while Redis still does the work.
 */
export function recordingClient(real: Redis): RedisScriptClient & { calls: ClientCall[] } {
  const calls: ClientCall[] = [];
  return {
    calls,
    eval(script: string, numkeys: number, ...args: (string | number)[]) {
      calls.push({ method: 'eval', args: [script, numkeys, ...args] });
      return real.eval(script, numkeys, ...args);
    },
    evalsha(sha: string, numkeys: number, ...args: (string | number)[]) {
      calls.push({ method: 'evalsha', args: [sha, numkeys, ...args] });
      return real.evalsha(sha, numkeys, ...args);
    },
  };
}

/**
 * An ioredis client that fails fast once the server is gone: no reconnects, no retries, and short
 * timeouts (what production clients should have too, so a dead Redis gives an error, not a hang).
 */
export function failFastClient(server: RedisServer): Redis {
  return server.client({
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    commandTimeout: 2000,
    connectTimeout: 2000,
  });
}

export { commandStats } from '../support/command-stats.js';

/** Polls until `key` is gone; Redis (or the in-memory keyspace), not a timer, says when the TTL ran out. */
export async function untilExpired(
  admin: Pick<KeyInspector, 'exists'>,
  key: string,
  withinMs: number,
): Promise<void> {
  const deadline = Date.now() + withinMs;
  while ((await admin.exists(key)) === 1) {
    if (Date.now() > deadline) throw new Error(`${key} still exists after ${withinMs} ms`);
    await sleep(10);
  }
}

/**
 * The test file's own redis-server: started before its tests (handed over with an admin client
 * through `ready`), stopped after them.
 */
export function withRedisServer(ready: (server: RedisServer, admin: Redis) => void): void {
  let started: RedisServer | undefined;
  beforeAll(async () => {
    started = await startRedis();
    ready(started, started.client());
  });
  afterAll(() => started?.stop());
}

/**
 * Makes workers: each its own service and its own connection (as after a fork), in `namespace`,
 * with a client of `family` (default: ioredis, whose clients `server.stop()` closes).
 */
export function lockWorkers(
  server: () => RedisServer,
  namespace: string,
  family?: ClientFamily,
): (options?: Partial<RedisLockOptions>) => RedisLockService {
  return (options = {}) =>
    new RedisLockService({
      redis: family ? () => family.connect(server()) : () => server().client(),
      namespace,
      ...options,
    });
}
