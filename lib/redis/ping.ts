import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

// For a client that has eval() only: any client the lock drives can run it.
const PING = luaScript(`return redis.call('PING')`, () => 'PONG');

/**
 * Sends PING through `client`: its own `ping()` when it has one (ioredis, iovalkey), else a
 * one-line Lua script. Resolves to Redis's answer (`'PONG'`); rejects when Redis could not be
 * asked. Never throws, whatever the client does.
 *
 * @example
 * ```ts
 * const pong = await ping(await lock.getClient()); // 'PONG'
 * ```
 */
export function ping(client: RedisScriptClient): Promise<unknown> {
  try {
    const own = (client as { ping?: unknown }).ping;
    if (typeof own === 'function') return Promise.resolve(own.call(client));
  } catch (error) {
    return Promise.reject(error);
  }
  return runScript(client, PING, [], []);
}
