import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

// Scripts rather than the commands themselves, so that any client with eval() will do.
const GET = luaScript(`return redis.call('GET', KEYS[1])`, (redis, [key]) => redis.get(key!));
const SET_PX = luaScript(
  `return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`,
  (redis, [key], [value, ms]) => redis.set(key!, value!, 'PX', ms!),
);
const DEL = luaScript(`return redis.call('DEL', KEYS[1])`, (redis, [key]) => redis.del(key!));
const PTTL = luaScript(`return redis.call('PTTL', KEYS[1])`, (redis, [key]) => redis.pttl(key!));
// The channel goes as the script's key, so that a Cluster client sends it to the channel's shard.
const SPUBLISH = luaScript(
  `return redis.call('SPUBLISH', KEYS[1], ARGV[1])`,
  (redis, [channel], [message]) => redis.spublish(channel!, message!),
);
const PING = luaScript(`return redis.call('PING')`, () => 'PONG');
// A cache entry, or when there is none its lock's PTTL (both keys in one slot): a miss tells
// whether a build is running, with no round trip more.
const ENTRY_OR_PTTL = luaScript(
  `
local entry = redis.call('GET', KEYS[1])
if entry then
  return entry
end
return redis.call('PTTL', KEYS[2])
`,
  (redis, [entry, lock]) => redis.get(entry!) ?? redis.pttl(lock!),
);

/** The string at `key`, or `null`. */
export function getValue(client: RedisScriptClient, key: string): Promise<string | null> {
  return runScript(client, GET, [key], []).then((answer) =>
    typeof answer === 'string' ? answer : null,
  );
}

/** The string at `key`, or else the PTTL of `lockKey` (a number); `null` for any other reply. */
export function getValueOrPttl(
  client: RedisScriptClient,
  key: string,
  lockKey: string,
): Promise<string | number | null> {
  return runScript(client, ENTRY_OR_PTTL, [key, lockKey], []).then((answer) =>
    typeof answer === 'string' || typeof answer === 'number' ? answer : null,
  );
}

export function setValue(
  client: RedisScriptClient,
  key: string,
  value: string,
  ttlMs: number,
): Promise<unknown> {
  return runScript(client, SET_PX, [key], [value, ttlMs]);
}

export function deleteKey(client: RedisScriptClient, key: string): Promise<unknown> {
  return runScript(client, DEL, [key], []);
}

/** SPUBLISH of `message` on the shard channel `channel`. */
export function publishToShard(
  client: RedisScriptClient,
  channel: string,
  message: string,
): Promise<unknown> {
  return runScript(client, SPUBLISH, [channel], [message]);
}

/** Redis's PTTL: `-2` when the key is gone, `-1` when it has no expiry. */
export async function lockPttl(client: RedisScriptClient, key: string): Promise<number> {
  return Number(await runScript(client, PTTL, [key], []));
}

/** The client's own `ping()` when it has one, else a script; never throws. */
export function ping(client: RedisScriptClient): Promise<unknown> {
  try {
    const own = (client as { ping?: unknown }).ping;
    if (typeof own === 'function') return Promise.resolve(own.call(client));
  } catch (error) {
    return Promise.reject(error);
  }
  return runScript(client, PING, [], []);
}
