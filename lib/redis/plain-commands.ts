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
// Every key in one slot (the caller's hash tag): one script reads them all on a Cluster too.
const MGET = luaScript(`return redis.call('MGET', unpack(KEYS))`, (redis, keys) =>
  keys.map((key) => redis.get(key)),
);
// Each tag's key set to a new version, random and made by the caller (so it never repeats, whatever
// Redis lost), then the announcement, on a channel of the same slot.
const BUMP_TAGS = luaScript(
  `
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
redis.call('SPUBLISH', ARGV[3], ARGV[4] .. ARGV[1])
return ARGV[1]
`,
  (redis, tags, [version, ms, channel, message]) => {
    for (const tag of tags) redis.set(tag, version!, 'PX', ms!);
    redis.spublish(channel!, message! + version!);
    return version;
  },
);
// The versions to stamp an entry with, each key's life renewed so that it outlives the entry. A
// missing key (evicted, flushed, expired) gets the caller's new version, which no entry carries,
// and that is announced: every worker then stamps with it. ARGV: the new version, the life in ms,
// the channel, the message's head, then each tag as JSON.
const STAMP_TAGS = luaScript(
  `
local versions = {}
local lost = {}
for i = 1, #KEYS do
  local version = redis.call('GET', KEYS[i])
  if version then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
  else
    version = ARGV[1]
    redis.call('SET', KEYS[i], version, 'PX', ARGV[2])
    lost[#lost + 1] = ARGV[4 + i]
  end
  versions[i] = version
end
if #lost > 0 then
  redis.call('SPUBLISH', ARGV[3], ARGV[4] .. '[' .. table.concat(lost, ',') .. ']\\n' .. ARGV[1])
end
return versions
`,
  (redis, keys, [fresh, ms, channel, head, ...tags]) => {
    const lost: string[] = [];
    const versions = keys.map((key, i) => {
      const version = redis.get(key);
      if (version !== null) {
        redis.pexpire(key, ms!);
        return version;
      }
      redis.set(key, fresh!, 'PX', ms!);
      lost.push(tags[i]!);
      return fresh!;
    });
    if (lost.length > 0) redis.spublish(channel!, `${head!}[${lost.join(',')}]\n${fresh!}`);
    return versions;
  },
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

/** The strings at `keys` (one slot), `null` for each missing one. */
export async function getValues(
  client: RedisScriptClient,
  keys: readonly string[],
): Promise<(string | null)[]> {
  const answer = await runScript(client, MGET, keys, []);
  if (!Array.isArray(answer) || answer.length !== keys.length) {
    throw new TypeError('MGET gave no list of values');
  }
  return answer.map((value: unknown) =>
    typeof value === 'string' ? value : typeof value === 'number' ? String(value) : null,
  );
}

/**
 * Sets each of `tags` (one slot) to `version` for `keepMs`, then SPUBLISHes `message` followed by
 * the version on `channel`.
 */
export async function bumpTags(
  client: RedisScriptClient,
  tags: readonly string[],
  version: string,
  keepMs: number,
  channel: string,
  message: string,
): Promise<void> {
  const answer = await runScript(client, BUMP_TAGS, tags, [version, keepMs, channel, message]);
  if (answer !== version) throw new TypeError('the tag bump gave no version');
}

/**
 * The versions at `keys` (one slot), each key's life renewed to `keepMs`; a missing key is set to
 * `fresh`, and `message` + `[names as JSON]\n` + `fresh` is SPUBLISHed on `channel` for those.
 */
export async function stampTags(
  client: RedisScriptClient,
  keys: readonly string[],
  names: readonly string[],
  fresh: string,
  keepMs: number,
  channel: string,
  message: string,
): Promise<string[]> {
  const json = names.map((name) => JSON.stringify(name));
  const answer = await runScript(client, STAMP_TAGS, keys, [
    fresh,
    keepMs,
    channel,
    message,
    ...json,
  ]);
  if (
    !Array.isArray(answer) ||
    answer.length !== keys.length ||
    !answer.every((version: unknown) => typeof version === 'string' && version !== '')
  ) {
    throw new TypeError('the tag stamp gave no versions');
  }
  return answer as string[];
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
