import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

// Compare-and-expire: only the holder of the token can push the expiry out.
const EXTEND = luaScript(
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`,
  (redis, [key], [token, ms]) => (redis.get(key!) === token ? redis.pexpire(key!, ms!) : 0),
);

/**
 * Sets the expiry of `key` to `ttlMs` from now while it still holds `token`. Resolves 1 when it
 * did, 0 when the lock is no longer ours.
 *
 * @example
 * ```ts
 * const answer = await extendLock(client, guard.key, guard.token, 30_000);
 * if (answer === 0) console.warn('lock lost');
 * ```
 */
export function extendLock(
  client: RedisScriptClient,
  key: string,
  token: string,
  ttlMs: number,
): Promise<unknown> {
  return runScript(client, EXTEND, [key], [token, ttlMs]);
}
