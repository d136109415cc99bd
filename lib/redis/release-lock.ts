import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

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
// a waiter the SPUBLISH wakes finds what this holder wrote. The wake-up goes out on the lock key's
// own shard channel (releaseChannel), with the released token as its text: Lua spells neither,
// and a release sends nothing for them it does not send anyway. pcall: on a Redis without
// SPUBLISH the release still succeeds and waiters poll.
// KEYS: lock [, written key]. ARGV: token [, payload, ttl ms]; a written key without a payload
// is deleted.
const RELEASE = luaScript(
  `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if KEYS[2] then
  if ARGV[2] then
    redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  else
    redis.call('DEL', KEYS[2])
  end
end
local deleted = redis.call('DEL', KEYS[1])
pcall(redis.call, 'SPUBLISH', KEYS[1], ARGV[1])
return deleted
`,
  (redis, [lock, written], [token, payload, ms]) => {
    if (redis.get(lock!) !== token) return 0;
    if (written !== undefined) {
      if (payload !== undefined) redis.set(written, payload, 'PX', ms!);
      else redis.del(written);
    }
    const deleted = redis.del(lock!);
    redis.spublish(lock!, token!);
    return deleted;
  },
);

/**
 * Deletes `lockKey` only while it still holds `token` and, when it did, applies `write` (if given)
 * just before and publishes the wake-up on `releaseChannel(lockKey)` just after, in one
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
  if (write === undefined) return runScript(client, RELEASE, [lockKey], [token]);
  const keys = [lockKey, write.key];
  return write.payload === undefined
    ? runScript(client, RELEASE, keys, [token])
    : runScript(client, RELEASE, keys, [token, write.payload, write.ttlMs]);
}
