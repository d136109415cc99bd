/**
 * Every text the library emits, keyed by message id. The ids for the lock backend are the keys of
 * the spec's MESSAGES tables; `ERROR` (and other UPPERCASE words listed per message) are
 * placeholders filled in when the message is rendered.
 *
 * @example
 * ```ts
 * import { ENGLISH_MESSAGES } from 'nestjs-buffer-lock';
 * console.log(ENGLISH_MESSAGES.redis_lock_failed); // 'Redis lock failed: ERROR'
 * ```
 */
export const ENGLISH_MESSAGES = {
  // new() — thrown as BufferLockConfigError
  redis_client_invalid:
    'cache_lock redis must be an object with an eval() method or a code reference returning one',
  redis_namespace_invalid: 'cache_lock namespace must be a non-empty string',
  redis_ttl_invalid: 'cache_lock ttl must be a positive number of seconds',
  redis_messages_invalid: 'cache_lock messages must be an object of texts keyed by message id',
  redis_fencing_invalid: 'cache_lock fencing must be true or false',
  // acquire() — returned as LockError
  lock_key_undefined: 'cache key is not defined',
  lock_key_invalid: 'cache key must be a string',
  redis_lock_failed: 'Redis lock failed: ERROR',
  redis_no_client: 'Redis client factory returned no client',
  redis_no_result: 'Redis lock command returned no result',
  // release() — returned as LockError
  redis_invalid_guard: 'invalid lock guard',
  redis_unlock_failed: 'Redis unlock failed: ERROR',
  // extend() — returned as LockError
  redis_extend_failed: 'Redis lock extend failed: ERROR',
  // share: true — the leader's result shared through Redis
  shared_result_unserializable:
    'The result for KEY cannot be shared between workers: WHAT at PATH cannot be serialized. Return plain data, pass a serializer, or set share: false',
  shared_result_unreadable: 'The shared result for KEY could not be read: ERROR',
  shared_result_failed: 'Redis shared result failed: ERROR',
  // watchdog — log line when a held lock was found gone
  lock_lost: 'The lock on KEY was lost (REASON); the work is no longer exclusive',
} as const;

/**
 * The id of one message in the catalog.
 *
 * @example
 * ```ts
 * const id: MessageId = 'redis_ttl_invalid';
 * ```
 */
export type MessageId = keyof typeof ENGLISH_MESSAGES;

/**
 * A catalog: a text for every message id. Locales other than English may leave ids out; the
 * English text is used for those.
 *
 * @example
 * ```ts
 * const german: MessageCatalog = { redis_no_client: 'Die Client-Fabrik lieferte keinen Client' };
 * ```
 */
export type MessageCatalog = Partial<Record<MessageId, string>>;

/**
 * Values for the placeholders of a message, such as `{ ERROR: 'connection refused' }`.
 *
 * @example
 * ```ts
 * const params: MessageParams = { ERROR: 'ECONNREFUSED' };
 * ```
 */
export type MessageParams = Readonly<Record<string, string | number>>;

/** Every message id, in catalog order. */
export const MESSAGE_IDS: readonly MessageId[] = Object.keys(ENGLISH_MESSAGES) as MessageId[];
