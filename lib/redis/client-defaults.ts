import type { Redis, RedisOptions } from 'ioredis';
import { LockError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';

/**
 * ioredis, loaded on first use: it is an optional peer, needed only to build a client from a URL or
 * ioredis options. Rejects with a `LockError` (`redis_client_missing`) when it is not installed.
 */
async function loadIoredis(): Promise<typeof Redis> {
  try {
    return (await import('ioredis')).Redis;
  } catch (error) {
    const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
    // ioredis itself missing; anything else (a broken install) is thrown as it is.
    if (code !== 'ERR_MODULE_NOT_FOUND' || !String(message).includes("'ioredis'")) throw error;
    const text = new BufferLockMessages().render('redis_client_missing');
    throw new LockError('redis_client_missing', text, { cause: error });
  }
}

/**
 * The ioredis settings applied to clients the module builds from a URL or from ioredis options:
 * fail fast when Redis is in trouble. A client you pass in yourself is used as it is: give it
 * these settings to get the same bounded latency. Under load the lock batches its own commands
 * (a command sent while others wait joins one pipeline); ioredis's `enableAutoPipelining` is left
 * off, since it defers even a lone command to the next turn of the event loop.
 *
 * | option | value | ioredis default | why |
 * | --- | --- | --- | --- |
 * | `commandTimeout` | 1000 ms | none | a paused or partitioned Redis answers no command: give up after 1 s |
 * | `maxRetriesPerRequest` | 1 | 20 | a command is not re-sent through 20 reconnects (minutes) |
 * | `enableOfflineQueue` | false | true | while disconnected, commands fail at once instead of queueing |
 * | `connectTimeout` | 2000 ms | 10000 ms | an unreachable host is reported within 2 s |
 *
 * @example
 * ```ts
 * const redis = new Redis(process.env.REDIS_URL!, { ...FAIL_FAST_CLIENT_DEFAULTS, lazyConnect: true });
 * await redis.connect(); // with no offline queue, wait for "ready" before the first command
 * ```
 */
export const FAIL_FAST_CLIENT_DEFAULTS = Object.freeze({
  commandTimeout: 1000,
  maxRetriesPerRequest: 1,
  enableOfflineQueue: false,
  connectTimeout: 2000,
} as const satisfies RedisOptions);

/**
 * Connects a fail-fast client: {@link FAIL_FAST_CLIENT_DEFAULTS} under the caller's options (an
 * option the caller sets wins), and resolves once the client is ready, because without an offline
 * queue a command sent before that would fail. Rejects, leaving nothing connected or reconnecting,
 * when Redis cannot be reached, and with a `LockError` (`redis_client_missing`) when ioredis is not
 * installed. Passwords in `url` are never put into error texts.
 *
 * @example
 * ```ts
 * const factory = () => connectFailFast(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
 * new RedisLockService({ redis: factory });
 * ```
 */
export async function connectFailFast(
  url: string | RedisOptions,
  options: RedisOptions = {},
): Promise<Redis> {
  const settings: RedisOptions = {
    ...FAIL_FAST_CLIENT_DEFAULTS,
    ...(typeof url === 'string' ? options : { ...url, ...options }),
    lazyConnect: true,
  };
  const Client = await loadIoredis();
  const client = typeof url === 'string' ? new Client(url, settings) : new Client(settings);
  // Errors reach callers as rejected commands; without a listener ioredis prints every retry.
  client.on('error', () => {});
  try {
    await client.connect();
    return client;
  } catch (error) {
    client.disconnect();
    throw error;
  }
}
