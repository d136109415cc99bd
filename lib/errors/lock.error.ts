import type { MessageId } from '../messages/messages.catalog.js';

/**
 * What `acquire`, `release` and `extend` return in their error slot: `code` is the message id,
 * `message` the rendered text, `cause` the client's own error when there was one.
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
 * Thrown by `new RedisLockService()` and at Nest bootstrap when options break the rules. It lists
 * every violation; `code` and `message` are those of the first, so a single bad option gives
 * exactly the catalog's text.
 *
 * @example
 * ```ts
 * if (e instanceof BufferLockConfigError) console.error(e.code, e.violations);
 * ```
 */
export class BufferLockConfigError extends Error {
  override readonly name = 'BufferLockConfigError';
  readonly code: MessageId;

  constructor(
    readonly violations: readonly {
      readonly property: string;
      readonly code: MessageId;
      readonly message: string;
    }[],
  ) {
    super(violations.map((v) => v.message).join('\n'));
    this.code = violations[0]!.code;
  }
}

export type ConfigViolation = BufferLockConfigError['violations'][number];
