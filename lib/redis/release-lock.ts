import type { RedisScriptClient } from '../options/redis-lock.options.js';
import { releaseChannel } from './keys.js';
import { luaScript, runScript } from './lua-script.js';

/**
 * What a release publishes on the lock's release channel. Waiters only need to know that the lock
 * became free, not by whom.
 *
 * @example
 * ```ts
 * sub.on('smessage', (channel, message) => message === WAKE_MESSAGE && tryAgain());
 * ```
 */
export const WAKE_MESSAGE = 'released';

/**
 * What a release writes in the same atomic step: `payload` under `key` for `ttlMs`, or, with
 * `payload` undefined, deletes `key`. `key` must be in the lock key's hash slot (a key from
 * `derivedKey` is), or a Redis Cluster refuses the script.
 *
 * @example
 * ```ts
 * const write: ReleaseWrite = { key: resultKey(lockKey), payload: '{"total":42}', ttlMs: 10_000 };
 * ```
 */
export interface ReleaseWrite {
  readonly key: string;
  readonly payload: string | undefined;
  readonly ttlMs: number;
}

// Compare-and-delete: a lock that expired and was taken by another holder is left alone, and then
// nothing is written or published. The write comes before the delete, in the same atomic step, so
// a waiter the SPUBLISH wakes finds what this holder wrote. SPUBLISH (Redis 7 sharded pub/sub)
// keeps the message on the lock's shard in a Cluster. pcall: on a Redis without SPUBLISH the
// release still succeeds and waiters fall back to their PTTL backstop.
// KEYS: lock, release channel [, written key]. ARGV: token, wake message [, payload, ttl ms];
// a written key without a payload is deleted.
const RELEASE = luaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if KEYS[3] then
  if ARGV[3] then
    redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
  else
    redis.call('DEL', KEYS[3])
  end
end
local deleted = redis.call('DEL', KEYS[1])
pcall(redis.call, 'SPUBLISH', KEYS[2], ARGV[2])
return deleted
`);

/**
 * Deletes `lockKey` only while it still holds `token` and, when it did, applies `write` (if given)
 * just before and publishes {@link WAKE_MESSAGE} on `releaseChannel(lockKey)` just after, in one
 * script and one round trip. Resolves 1 when it deleted the lock and 0 when the lock had already
 * expired or belongs to someone else (then nothing was written and nothing published).
 *
 * @example
 * ```ts
 * await releaseLock(client, guard.key, guard.token);
 * await releaseLock(client, guard.key, guard.token, { key: resultKey(guard.key), payload, ttlMs });
 * ```
 */
export function releaseLock(
  client: RedisScriptClient,
  lockKey: string,
  token: string,
  write?: ReleaseWrite,
): Promise<unknown> {
  const channel = releaseChannel(lockKey);
  if (write === undefined) {
    return runScript(client, RELEASE, [lockKey, channel], [token, WAKE_MESSAGE]);
  }
  const keys = [lockKey, channel, write.key];
  return write.payload === undefined
    ? runScript(client, RELEASE, keys, [token, WAKE_MESSAGE])
    : runScript(client, RELEASE, keys, [token, WAKE_MESSAGE, write.payload, write.ttlMs]);
}
