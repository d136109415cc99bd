import { errorText } from '../messages/error-text.js';
import { LockError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';

// Thrown inside the service only, each worded by lockFailure.
export class NoClient extends Error {}
/** Something with `eval()` shaped like node-redis, lacking a method the lock calls. */
export class UnsupportedClient extends Error {}
export class ConnectTimeout extends Error {}

/** The code of a failure the library words on its own; a Proxy whose traps throw is none. */
function ownFailure(error: unknown): MessageId | undefined {
  try {
    if (error instanceof NoClient) return 'redis_no_client';
    if (error instanceof UnsupportedClient) return 'redis_client_invalid';
    if (error instanceof ConnectTimeout) return 'redis_connect_timeout';
    // connectFailFast's, made in English: rendered again with this service's overrides.
    if (error instanceof LockError && error.code === 'redis_client_missing') return error.code;
  } catch {
    // not one of ours
  }
  return undefined;
}

/**
 * A Redis failure in `id`'s words: the client's own error in ERROR and in `cause`, or one of the
 * library's own with its catalog text in ERROR and its code.
 */
export function lockFailure(
  messages: BufferLockMessages,
  connectTimeout: number,
  id: MessageId,
  error: unknown,
): LockError {
  const own = ownFailure(error);
  if (own === undefined) {
    return new LockError(id, messages.render(id, { ERROR: errorText(error) }), { cause: error });
  }
  const params = own === 'redis_connect_timeout' ? { SECONDS: connectTimeout } : undefined;
  const text = messages.render(id, { ERROR: messages.render(own, params) });
  return own === 'redis_client_missing'
    ? new LockError(own, text, { cause: (error as LockError).cause })
    : new LockError(own, text);
}
