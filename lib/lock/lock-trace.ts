import type { LockError } from '../errors/lock.error.js';
import { keyHashOf, lockChannel, nowMs, type LockTrace } from '../telemetry/channels.js';
import { readGuard } from './guards.js';

/** When each guard acquired under a lock trace was taken, for the hold time of its release. */
const heldSince = new WeakMap<object, number>();

const outcomeOf = (operation: LockTrace['operation'], ok: unknown): LockTrace['outcome'] => {
  if (operation === 'acquire') return ok ? 'acquired' : 'busy';
  if (operation === 'release') return 'released';
  return ok ? 'extended' : 'lost';
};

/**
 * `run` as one operation of the lock channel; the key is `redisKey`, else `given`'s. The tuple's
 * error is published on the channel's error event: these operations answer with it, not reject.
 */
export function traceLock<R extends readonly [unknown, LockError | undefined]>(
  operation: LockTrace['operation'],
  redisKey: string | undefined,
  given: unknown,
  run: () => Promise<R>,
): Promise<R> {
  const key = redisKey ?? readGuard(given)?.key ?? '';
  const context: LockTrace = { operation, keyHash: keyHashOf(key) };
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
    if (operation === 'release' && typeof given === 'object' && given !== null) {
      const since = heldSince.get(given);
      if (since !== undefined) context.holdMs = now - since;
      if (!error) heldSince.delete(given);
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
