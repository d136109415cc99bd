import type { RedisScriptClient } from '../options/redis-lock.options.js';
import { releaseChannel } from './keys.js';
import { luaScript, runScript } from './lua-script.js';

/**
 * What a release publishes on the lock's release channel (the release script writes the same
 * text). Waiters only need to know that the lock became free, not by whom.
 *
 * @example
 * ```ts
 * sub.on('smessage', (channel, message) => message === WAKE_MESSAGE && tryAgain());
 * ```
 */
export const WAKE_MESSAGE = 'released';

// Compare-and-delete: a lock that expired and was taken by another holder is left alone. Only a
// release that deleted the key wakes the waiters, in the same atomic script. SPUBLISH (Redis 7
// sharded pub/sub) keeps the message on the lock's shard in a Cluster; the channel is in the
// lock's slot. It is KEYS[2] when given; a key without braces sends none, and the script builds
// '{' .. key .. '}:release' (what releaseChannel makes of such a key): one key and one argument
// less to send and parse per release. The message is WAKE_MESSAGE. pcall: on a Redis without
// SPUBLISH the release still succeeds and waiters fall back to their PTTL backstop.
const RELEASE = luaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local deleted = redis.call('DEL', KEYS[1])
  pcall(redis.call, 'SPUBLISH', KEYS[2] or ('{' .. KEYS[1] .. '}:release'), 'released')
  return deleted
end
return 0
`);

/**
 * Deletes `key` only while it still holds `token` and, when it did, publishes a wake-up
 * ({@link WAKE_MESSAGE}) on `releaseChannel(key)` in the same script. Resolves 1 when it deleted
 * the key and 0 when the lock had already expired or belongs to someone else (nothing published).
 */
export function releaseLock(
  client: RedisScriptClient,
  key: string,
  token: string,
): Promise<unknown> {
  const plain = !key.includes('{') && !key.includes('}');
  return runScript(client, RELEASE, plain ? [key] : [key, releaseChannel(key)], [token]);
}
