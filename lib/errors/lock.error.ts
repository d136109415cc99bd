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
 * every violation; `code` and `message` are those of the first: the catalog's text, then the value
 * given (`ttl: "30s"`), or the default in effect where the rule reads one the app left out.
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
      /** The catalog's text, then the values the rule read (see `values`). */
      readonly message: string;
      /** The options the rule read, each as given (shown safely) or as its default in effect. */
      readonly values: readonly {
        readonly name: string;
        readonly value: string;
        readonly isDefault: boolean;
      }[];
    }[],
  ) {
    super(violations.map((v) => v.message).join('\n'));
    this.code = violations[0]!.code;
  }
}

export type ConfigViolation = BufferLockConfigError['violations'][number];
export type ConfigValue = ConfigViolation['values'][number];
