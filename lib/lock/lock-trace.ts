import type { LockError } from '../errors/lock.error.js';
import { keyHashOf, lockChannel, nowMs, type LockTrace } from '../telemetry/channels.js';

/** When each guard acquired under a lock trace was taken, for the hold time of its release. */
const heldSince = new WeakMap<object, number>();

/** The lock channel's outcome of an answered operation. */
const outcomeOf = (operation: LockTrace['operation'], ok: unknown): LockTrace['outcome'] => {
  if (operation === 'acquire') return ok ? 'acquired' : 'busy';
  if (operation === 'release') return 'released';
  return ok ? 'extended' : 'lost';
};

/**
 * `run` as one operation of the lock channel. The tuple's error, if any, is published on the
 * channel's error event: these operations answer with it rather than reject.
 *
 * @example
 * ```ts
 * if (lockChannel.hasSubscribers) {
 *   return traceLock('acquire', redisKey, undefined, () => this.take(redisKey, ttl));
 * }
 * ```
 */
export function traceLock<R extends readonly [unknown, LockError | undefined]>(
  operation: LockTrace['operation'],
  redisKey: string,
  guard: object | undefined,
  run: () => Promise<R>,
): Promise<R> {
  const context: LockTrace = { operation, keyHash: keyHashOf(redisKey) };
  const started = nowMs();
  return lockChannel.tracePromise(async () => {
    let result: R;
    try {
      result = await run();
    } catch (error) {
      context.durationMs = nowMs() - started;
      context.outcome = 'failed';
      throw error;
    }
    const now = nowMs();
    context.durationMs = now - started;
    const [ok, error] = result;
    if (operation === 'acquire' && typeof ok === 'object' && ok !== null) heldSince.set(ok, now);
    if (operation === 'release' && guard !== undefined) {
      const since = heldSince.get(guard);
      if (since !== undefined) context.holdMs = now - since;
      if (!error) heldSince.delete(guard);
    }
    if (error) {
      context.outcome = 'failed';
      context.error = error;
      lockChannel.error.publish(context);
    } else {
      context.outcome = outcomeOf(operation, ok);
    }
    return result;
  }, context);
}
