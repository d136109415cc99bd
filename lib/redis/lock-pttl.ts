import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

// A script rather than the PTTL command, so that any client with eval() will do.
const PTTL = luaScript(`return redis.call('PTTL', KEYS[1])`, (redis, [key]) => redis.pttl(key!));

/**
 * The lock's remaining life in milliseconds: Redis's PTTL (`-2` when the key is gone, `-1` when it
 * has no expiry). Rejects when Redis could not be asked.
 *
 * @example
 * ```ts
 * const ms = await lockPttl(client, 'buffer:lock:9a0364b9e99bb480dd25e1f0284c8555');
 * if (ms === -2) console.log('free');
 * ```
 */
export async function lockPttl(client: RedisScriptClient, key: string): Promise<number> {
  return Number(await runScript(client, PTTL, [key], []));
}
