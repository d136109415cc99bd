import type { RedisScriptClient } from '../options/redis-lock.options.js';
import { luaScript, runScript } from './lua-script.js';

// SET NX answers nil when the key exists; Lua sees that as false.
const ACQUIRE = luaScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
`);

/**
 * Sets `key` to `token` for `ttlMs` milliseconds unless the key exists, in one atomic step.
 * Resolves 1 when the lock was taken, 0 when it is held, and whatever a misbehaving client
 * answered otherwise (the caller treats a missing answer as an error).
 */
export function acquireLock(
  client: RedisScriptClient,
  key: string,
  token: string,
  ttlMs: number,
): Promise<unknown> {
  return runScript(client, ACQUIRE, [key], [token, ttlMs]);
}
