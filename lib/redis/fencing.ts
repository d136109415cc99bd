import type { RedisScriptClient } from '../types/clients.js';
import { fenceKey } from './keys.js';
import { luaScript, runScript } from './lua-script.js';

// The acquire of acquire-lock.ts, plus INCR of the lock's fence counter in the same slot, in one
// atomic step: every holder of a key gets a larger number than the one before it. The counter has
// no expiry, so the numbers never go back (one small integer per lock key, kept for good).
const ACQUIRE_FENCED = luaScript(
  `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
`,
  (redis, [key, fence], [token, ms]) =>
    redis.set(key!, token!, 'NX', 'PX', ms!) === null ? 0 : redis.incr(fence!),
);

/**
 * Like `acquireLock`, and when the lock is taken also increments `fenceKey(key)`. Resolves the new
 * fencing number (1 or more) when the lock was taken, 0 when it is held.
 *
 * Give the number to the storage you write to and have it reject writes that carry a number lower
 * than one it already saw: a holder whose lock expired (GC pause, partition) can then no longer
 * overwrite the work of the holder after it.
 *
 * @example
 * ```ts
 * const fence = Number(await acquireFencedLock(client, key, token, 30_000));
 * if (fence > 0) await db.query('UPDATE report SET body = $1, fence = $2 WHERE fence < $2', [body, fence]);
 * ```
 */
export function acquireFencedLock(
  client: RedisScriptClient,
  key: string,
  token: string,
  ttlMs: number,
): Promise<unknown> {
  return runScript(client, ACQUIRE_FENCED, [key, fenceKey(key)], [token, ttlMs]);
}
