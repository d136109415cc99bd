import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

// Scripts rather than the commands themselves, so that any client with eval() will do.
const GET = luaScript(`return redis.call('GET', KEYS[1])`, (redis, [key]) => redis.get(key!));
const SET_PX = luaScript(
  `return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`,
  (redis, [key], [value, ms]) => redis.set(key!, value!, 'PX', ms!),
);
const DEL = luaScript(`return redis.call('DEL', KEYS[1])`, (redis, [key]) => redis.del(key!));

/**
 * The string at `key`, or `null` when there is none. Rejects when Redis could not be asked.
 *
 * @example
 * ```ts
 * await getValue(client, 'buffer:cache:report'); // 'hello', or null
 * ```
 */
export function getValue(client: RedisScriptClient, key: string): Promise<string | null> {
  return runScript(client, GET, [key], []).then((answer) =>
    typeof answer === 'string' ? answer : null,
  );
}

/**
 * Sets `key` to `value` for `ttlMs` milliseconds.
 *
 * @example
 * ```ts
 * await setValue(client, 'buffer:cache:report', 'hello', 60_000); // 'OK'
 * ```
 */
export function setValue(
  client: RedisScriptClient,
  key: string,
  value: string,
  ttlMs: number,
): Promise<unknown> {
  return runScript(client, SET_PX, [key], [value, ttlMs]);
}

/**
 * Deletes `key`.
 *
 * @example
 * ```ts
 * await deleteKey(client, 'buffer:cache:report'); // 1 when it was there, else 0
 * ```
 */
export function deleteKey(client: RedisScriptClient, key: string): Promise<unknown> {
  return runScript(client, DEL, [key], []);
}
