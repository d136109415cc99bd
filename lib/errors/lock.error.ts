import type { MessageId } from '../messages/messages.catalog.js';

/**
 * What `acquire`, `release` and `extend` return in their error slot. `code` is the message id
 * (a key of `ENGLISH_MESSAGES`), `message` the rendered text, and `cause` the client's own error
 * when there was one.
 *
 * @example
 * ```ts
 * const [guard, error] = await lock.acquire('report');
 * if (error?.code === 'redis_lock_failed') console.warn(error.message, error.cause);
 * ```
 */
export class LockError extends Error {
  override readonly name = 'LockError';

  constructor(
    readonly code: MessageId,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * One broken rule found while validating options.
 *
 * @example
 * ```ts
 * const violation: ConfigViolation = {
 *   property: 'ttl',
 *   code: 'redis_ttl_invalid',
 *   message: 'cache_lock ttl must be a positive number of seconds',
 * };
 * ```
 */
export interface ConfigViolation {
  readonly property: string;
  readonly code: MessageId;
  readonly message: string;
}

/**
 * Thrown by `new RedisLockService()` and at Nest bootstrap when options break the rules. It lists
 * every violation; `code` and `message` are those of the first, so a single bad option gives
 * exactly the catalog's text.
 *
 * @example
 * ```ts
 * try {
 *   new RedisLockService({ redis: client, ttl: 0 });
 * } catch (e) {
 *   if (e instanceof BufferLockConfigError) console.error(e.code, e.violations);
 * }
 * ```
 */
export class BufferLockConfigError extends Error {
  override readonly name = 'BufferLockConfigError';
  readonly code: MessageId;

  constructor(readonly violations: readonly ConfigViolation[]) {
    super(violations.map((v) => v.message).join('\n'));
    this.code = violations[0]!.code;
  }
}
