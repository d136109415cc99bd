import { errorText } from '../messages/error-text.js';
import { LockError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import { BadReply } from '../redis/bad-reply.js';

/**
 * Thrown inside the service when the factory gives no client; never leaves it.
 *
 * @example
 * ```ts
 * if (!isScriptClient(client)) throw new NoClient();
 * ```
 */
export class NoClient extends Error {}

/**
 * Thrown inside the service when the factory gives something with `eval()` the lock does not
 * drive (shaped like node-redis, without a method the lock calls); never leaves it.
 *
 * @example
 * ```ts
 * if (!isScriptClient(client) && hasEval(client)) throw new UnsupportedClient();
 * ```
 */
export class UnsupportedClient extends Error {}

/**
 * Thrown inside the service when the factory gives no client in `connectTimeout`; never leaves it.
 *
 * @example
 * ```ts
 * setTimeout(() => reject(new ConnectTimeout()), connectTimeout * 1000);
 * ```
 */
export class ConnectTimeout extends Error {}

/**
 * Whether `error` is one the library throws itself (in the service, or connectFailFast's
 * `redis_client_missing`) for a failure the service words on its own. A
 * client's error may be a Proxy whose traps throw, even on `instanceof`: that is none of them.
 *
 * @example
 * ```ts
 * isOwnFailure(new ConnectTimeout()); // true
 * isOwnFailure(new Error('ECONNREFUSED')); // false: the client's own
 * ```
 */
export const isOwnFailure = (
  error: unknown,
): error is NoClient | UnsupportedClient | ConnectTimeout | BadReply | LockError => {
  try {
    return (
      error instanceof NoClient ||
      error instanceof UnsupportedClient ||
      error instanceof ConnectTimeout ||
      error instanceof BadReply ||
      (error instanceof LockError && error.code === 'redis_client_missing')
    );
  } catch {
    return false;
  }
};

/**
 * A Redis failure in `id`'s words; the client's own error goes in ERROR and in `cause`. The
 * library's own failures ({@link isOwnFailure}) get their catalog text in ERROR and their code;
 * `connectTimeout` (seconds) is the SECONDS of `redis_connect_timeout`.
 *
 * @example
 * ```ts
 * lockFailure(messages, 5, 'redis_lock_failed', new ConnectTimeout()); // code redis_connect_timeout
 * lockFailure(messages, 5, 'redis_lock_failed', new Error('ECONNREFUSED')); // code redis_lock_failed
 * ```
 */
export function lockFailure(
  messages: BufferLockMessages,
  connectTimeout: number,
  id: MessageId,
  error: unknown,
): LockError {
  if (!isOwnFailure(error)) {
    return new LockError(id, messages.render(id, { ERROR: errorText(error) }), {
      cause: error,
    });
  }
  if (error instanceof NoClient) {
    const text = messages.render('redis_no_client');
    return new LockError('redis_no_client', messages.render(id, { ERROR: text }));
  }
  if (error instanceof UnsupportedClient) {
    const text = messages.render('redis_client_invalid');
    return new LockError('redis_client_invalid', messages.render(id, { ERROR: text }));
  }
  if (error instanceof LockError && error.code === 'redis_client_missing') {
    // Made by connectFailFast in English: rendered again here, with this service's overrides.
    const text = messages.render('redis_client_missing');
    return new LockError('redis_client_missing', messages.render(id, { ERROR: text }), {
      cause: error.cause,
    });
  }
  if (error instanceof ConnectTimeout) {
    const text = messages.render('redis_connect_timeout', { SECONDS: connectTimeout });
    return new LockError('redis_connect_timeout', messages.render(id, { ERROR: text }));
  }
  const text = messages.render('redis_bad_reply');
  return new LockError('redis_bad_reply', messages.render(id, { ERROR: text }));
}
