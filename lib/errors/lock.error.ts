import { attempt } from '../messages/error-text.js';
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
    super(message, options && { cause: withoutCommand(options.cause) });
  }
}

// A client's error carries the command it failed on, arguments and all (a HELLO's AUTH password
// among them): the cause keeps the error's name, message and stack, and drops the command.
function withoutCommand(cause: unknown): unknown {
  return attempt(() => {
    if (!(cause instanceof Error) || !('command' in cause)) return cause;
    const inner = withoutCommand(cause.cause);
    const copy = new Error(cause.message, inner === undefined ? undefined : { cause: inner });
    copy.name = cause.name;
    copy.stack = cause.stack;
    return copy;
  }, cause); // a hostile object (a Proxy whose traps throw) is kept as it is
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
