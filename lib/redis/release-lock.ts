import type { RedisScriptClient } from '../options/redis-lock.options.js';
import { luaScript, runScript } from './lua-script.js';

// Compare-and-delete: a lock that expired and was taken by another holder is left alone.
const RELEASE = luaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`);

/**
 * Deletes `key` only while it still holds `token`. Resolves 1 when it deleted the key and 0 when
 * the lock had already expired or belongs to someone else.
 */
export function releaseLock(
  client: RedisScriptClient,
  key: string,
  token: string,
): Promise<unknown> {
  return runScript(client, RELEASE, [key], [token]);
}
