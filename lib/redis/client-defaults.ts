import type { Redis, RedisOptions } from 'ioredis';
import { LockError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { MessageId } from '../messages/messages.catalog.js';

// ioredis is an optional peer, needed only to build a client from a URL or ioredis options.
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

// Fail fast when Redis is in trouble. No `enableAutoPipelining`: it defers even a lone command to
// the next turn, and the lock batches under load by itself.
export const FAIL_FAST_CLIENT_DEFAULTS = Object.freeze({
  commandTimeout: 1000, // a paused or partitioned Redis answers nothing (default: none)
  maxRetriesPerRequest: 1, // not re-sent through 20 reconnects (minutes)
  enableOfflineQueue: false, // fail at once while disconnected instead of queueing
  connectTimeout: 2000, // an unreachable host is reported within 2 s (default 10 s)
} as const satisfies RedisOptions);

/**
 * A connected fail-fast client: FAIL_FAST_CLIENT_DEFAULTS under your options, resolved once ready
 * (no offline queue). Rejects, leaving nothing reconnecting, when Redis cannot be reached (with
 * `redis_unreachable`, saying where and why: refused, authentication, no answer, unknown host),
 * and with `redis_client_missing` when ioredis is not installed. Passwords never reach errors.
 *
 * @example
 * ```ts
 * new RedisLockService({ redis: () => connectFailFast(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379') });
 * ```
 */
export function connectFailFast(
  url: string | RedisOptions,
  options: RedisOptions = {},
): Promise<Redis> {
  return connectTelling(url, options, new BufferLockMessages());
}

/** `connectFailFast`, with its failure told in `messages`. */
export async function connectTelling(
  url: string | RedisOptions,
  options: RedisOptions,
  messages: BufferLockMessages,
): Promise<Redis> {
  const settings: RedisOptions = {
    ...FAIL_FAST_CLIENT_DEFAULTS,
    ...(typeof url === 'string' ? options : { ...url, ...options }),
    lazyConnect: true,
  };
  const Client = await loadIoredis();
  const client = typeof url === 'string' ? new Client(url, settings) : new Client(settings);
  // Errors reach callers as rejected commands; without a listener ioredis prints every retry. The
  // last one says why a connect failed, where connect() says only "Connection is closed.".
  let last: unknown;
  client.on('error', (error: unknown) => (last = error));
  try {
    await client.connect();
    return client;
  } catch (error) {
    client.disconnect();
    const cause = last ?? error;
    const { host, port, path } = client.options;
    const why = whyOf(cause);
    const text = messages.render('redis_unreachable', {
      WHERE: path ?? `${host}:${port}`,
      WHY: why ? messages.render(why) : errorText(cause),
    });
    throw new LockError('redis_unreachable', text, { cause });
  }
}

function whyOf(error: unknown): MessageId | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  const text = String(message);
  if (code === 'ECONNREFUSED') return 'redis_refused';
  if (/^(WRONGPASS|NOAUTH)|invalid password/i.test(text)) return 'redis_auth_failed';
  if (code === 'ETIMEDOUT' || /ETIMEDOUT|timed out/i.test(text)) return 'redis_timed_out';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'redis_host_unknown';
  return undefined;
}
