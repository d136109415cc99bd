import type { RedisScriptClient } from '../types/clients.js';
import { claimKey, fenceKey } from './keys.js';
import { luaScript, runScript } from './lua-script.js';

// SET NX answers nil when the key exists; Lua sees that as false. ARGV[1] is the lock's ttl in ms
// and its token, as one argument (`<ms> <token>`): a cache hit, which needs neither, sends one
// argument less. ARGV[2], when given, is how long the fence counter (KEYS[2]) outlives the
// acquire; the key after those, when given, holds an entry whose presence answers instead of the
// acquire, and the one after it is the holder's claim, set with the lock. Each fencing number is
// the counter + 1, or the server's TIME in µs when that is larger. A counter that expired starts
// again at TIME, above all it gave: its last number was the TIME of its last acquire plus the
// acquires that outran the clock (Redis runs far fewer than one script a µs), and FENCE_IDLE_MS
// (10^6 µs) or more has passed since.
const ACQUIRE = luaScript(
  `
local found = KEYS[ARGV[2] and 3 or 2]
if found then
  local entry = redis.call('GET', found)
  if entry then
    return entry
  end
end
local space = string.find(ARGV[1], ' ', 1, true)
local ms, token = string.sub(ARGV[1], 1, space - 1), string.sub(ARGV[1], space + 1)
if not redis.call('SET', KEYS[1], token, 'NX', 'PX', ms) then
  return 0
end
local claim = KEYS[ARGV[2] and 4 or 3]
if claim then
  redis.call('SET', claim, token, 'PX', ms)
end
if not ARGV[2] then
  return 1
end
local now = redis.call('TIME')
local fence = math.max(redis.call('INCR', KEYS[2]), now[1] * 1000000 + now[2])
redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[2])
return fence
`,
  (redis, keys, [lease, idleMs]) => {
    const [lock, fence] = keys;
    const found = keys[idleMs === undefined ? 1 : 2];
    const entry = found === undefined ? null : redis.get(found);
    if (entry !== null) return entry;
    const space = lease!.indexOf(' ');
    const [ms, token] = [lease!.slice(0, space), lease!.slice(space + 1)];
    if (redis.set(lock!, token, 'NX', 'PX', ms) === null) return 0;
    const claim = keys[idleMs === undefined ? 2 : 3];
    if (claim !== undefined) redis.set(claim, token, 'PX', ms);
    if (idleMs === undefined) return 1;
    const [seconds, micros] = redis.time();
    const next = Math.max(redis.incr(fence!), Number(seconds) * 1e6 + Number(micros));
    redis.set(fence!, String(next), 'PX', idleMs);
    return next;
  },
);

// A SET reply other than 'OK' or null (the number 1, say) must not read as "taken".
const UNEXPECTED_SET_REPLY = Symbol('unexpected SET reply');

const fromSetReply = (reply: unknown): unknown =>
  reply === 'OK' ? 1 : reply === null ? 0 : reply === undefined ? undefined : UNEXPECTED_SET_REPLY;

/** An entry's key, and the lock's `claimKey`, both in the lock's slot. */
export interface UnlessFound {
  readonly key: string;
  readonly claim: string;
}

// How long a fence counter outlives the last acquire of its key, past the lock's own ttl.
const FENCE_IDLE_MS = 1000;

/**
 * Resolves 1 when taken (with `fenced`, the new fencing number instead), 0 when held; any other
 * answer is the client's. With `unlessFound`, the text at its `key` instead, when there is one (no
 * lock is taken then): it must be in the lock's slot; a lock taken then is claimed (its `claim`)
 * with it, as a cache build's lock is. A fence counter expires once its key has not
 * been acquired for `ttlMs` + 1 s.
 */
export function acquireLock(
  client: RedisScriptClient,
  key: string,
  token: string,
  ttlMs: number,
  fenced = false,
  unlessFound?: UnlessFound,
): Promise<unknown> {
  // The plain SET is the same atomic command, without a Lua call on the server.
  if (!fenced && unlessFound === undefined && typeof client.set === 'function') {
    // Promise.resolve: a misbehaving client may answer with no promise, or nothing at all.
    return Promise.resolve(client.set(key, token, 'PX', ttlMs, 'NX')).then(fromSetReply);
  }
  const keys = fenced ? [key, fenceKey(key)] : [key];
  if (unlessFound !== undefined) keys.push(unlessFound.key, unlessFound.claim);
  const lease = `${ttlMs} ${token}`;
  const args = fenced ? [lease, ttlMs + FENCE_IDLE_MS] : [lease];
  return runScript(client, ACQUIRE, keys, args);
}

// The holder's claim (KEYS[2]) lives as long as its lock: a build past the claim's first expiry
// still stores its entry.
const EXTEND = luaScript(
  `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`,
  (redis, [key, mark], [token, ms]) => {
    if (redis.get(key!) !== token) return 0;
    redis.pexpire(mark!, ms!);
    return redis.pexpire(key!, ms!);
  },
);

/** Resolves 1 when the expiry moved, 0 when the lock is no longer this token's. */
export function extendLock(
  client: RedisScriptClient,
  key: string,
  token: string,
  ttlMs: number,
): Promise<unknown> {
  return runScript(client, EXTEND, [key, claimKey(key)], [token, ttlMs]);
}

/** What precedes a payload carried by a release's wake-up, by what it is (a token has no `=`). */
export const CARRIED = { entry: '=e', result: '=r' } as const;
export type CarriedKind = keyof typeof CARRIED;

/** The largest payload (UTF-8 bytes) that rides the wake-up; waiters read a larger one. */
export const WAKE_MAX_BYTES = 64 * 1024;

/** Written in the release's step: `payload` for `ttlMs`, or deleted without one. */
export interface ReleaseWrite {
  /** Where it is written; `undefined`: nowhere, the payload only rides the wake-up. */
  readonly key: string | undefined;
  readonly payload: string | undefined;
  readonly ttlMs: number;
  /** The payload rides the wake-up as this, when it is no larger than WAKE_MAX_BYTES. */
  readonly carried?: CarriedKind;
  /**
   * Written only while the holder's claim (`claimKey`) names it: a cache build's entry, which no
   * write of its key may have come after. The claim goes with the lock.
   */
  readonly claimed?: boolean;
}

/** The payload a wake-up's `text` carries as `kind`, or `undefined` (then it is read). */
export const carriedPayload = (text: string | undefined, kind: CarriedKind): string | undefined =>
  text?.startsWith(CARRIED[kind]) ? text.slice(CARRIED[kind].length) : undefined;

// A UTF-8 byte is at most 3 per UTF-16 unit: a short payload is not measured.
const fitsWake = (payload: string): boolean =>
  payload.length * 3 <= WAKE_MAX_BYTES || Buffer.byteLength(payload) <= WAKE_MAX_BYTES;

// Compare-and-delete. The write goes before the delete, so a waiter the SPUBLISH wakes finds it.
// A holder its claim (KEYS[2]) no longer names (a write of the key came after its build began, or
// the claim was lost) writes nothing and carries nothing, and answers 2; a write that needs no
// claim names the lock itself there. The wake-up goes on the lock key's own shard
// channel: ARGV[4] (a CARRIED mark) and the payload when it is given (waiters answer from it, with
// no read), else the token (waiters read). pcall: on a Redis without SPUBLISH the release still
// succeeds and waiters poll. Every key must be in the lock's slot, or a Cluster refuses the script.
const RELEASE = luaScript(
  `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local claim = KEYS[2] ~= KEYS[1] and KEYS[2]
local superseded = claim and redis.call('GET', claim) ~= ARGV[1]
if KEYS[3] and not superseded then
  if ARGV[2] then
    redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
  else
    redis.call('DEL', KEYS[3])
  end
end
local deleted = redis.call('DEL', KEYS[1])
local wake = ARGV[1]
if ARGV[4] and not superseded then
  wake = ARGV[4] .. ARGV[2]
end
pcall(redis.call, 'SPUBLISH', KEYS[1], wake)
if claim then
  redis.call('DEL', claim)
end
if superseded then
  return 2
end
return deleted
`,
  (redis, [lock, mark, written], [token, payload, ms, carry]) => {
    if (redis.get(lock!) !== token) return 0;
    const claim = mark === lock ? undefined : mark;
    const superseded = claim !== undefined && redis.get(claim) !== token;
    if (written !== undefined && !superseded) {
      if (payload !== undefined) redis.set(written, payload, 'PX', ms!);
      else redis.del(written);
    }
    const deleted = redis.del(lock!);
    const wake = carry === undefined || superseded ? token! : carry + payload!;
    redis.spublish(lock!, wake);
    if (claim !== undefined) redis.del(claim);
    return superseded ? 2 : deleted;
  },
);

/**
 * Resolves 1 when it deleted the lock (and wrote, and woke), 0 when the lock was not ours, 2 when
 * it deleted the lock but wrote nothing: its claim no longer named it.
 */
export function releaseLock(
  client: RedisScriptClient,
  lockKey: string,
  token: string,
  write?: ReleaseWrite,
): Promise<unknown> {
  if (write === undefined) return runScript(client, RELEASE, [lockKey], [token]);
  const { key, payload, carried } = write;
  const claim = write.claimed ? claimKey(lockKey) : lockKey;
  const keys = key === undefined ? [lockKey, claim] : [lockKey, claim, key];
  if (payload !== undefined && carried !== undefined && fitsWake(payload)) {
    return runScript(client, RELEASE, keys, [token, payload, write.ttlMs, CARRIED[carried]]);
  }
  return key === undefined || payload === undefined
    ? runScript(client, RELEASE, keys, [token])
    : runScript(client, RELEASE, keys, [token, payload, write.ttlMs]);
}

// A write of an entry (or its delete, without ARGV[1]) that outdates the build in flight: its
// holder's claim goes. All keys in the lock's slot.
const WRITE_OUTDATING = luaScript(
  `
if KEYS[2] then
  if ARGV[1] then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
  else
    redis.call('DEL', KEYS[2])
  end
end
redis.call('DEL', KEYS[1])
return 1
`,
  (redis, [claim, entry], [payload, ms]) => {
    if (entry !== undefined) {
      if (payload !== undefined) redis.set(entry, payload, 'PX', ms!);
      else redis.del(entry);
    }
    redis.del(claim!);
    return 1;
  },
);

/**
 * Outdates the build in flight on `lockKey`, if any (its release stores nothing); with `entryKey`
 * (in the lock's slot), first writes `payload` there for `ttlMs`, or deletes it.
 */
export function writeOutdating(
  client: RedisScriptClient,
  lockKey: string,
  entryKey?: string,
  payload?: string,
  ttlMs?: number,
): Promise<unknown> {
  const keys = [claimKey(lockKey)];
  if (entryKey === undefined) return runScript(client, WRITE_OUTDATING, keys, []);
  keys.push(entryKey);
  const args = payload === undefined ? [] : [payload, ttlMs!];
  return runScript(client, WRITE_OUTDATING, keys, args);
}

// A build under a lock taken by a plain acquire claims it before its factory runs: a write that
// returned before the claim came before the factory read its source.
const CLAIM = luaScript(
  `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then
  return 0
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ttl)
return 1
`,
  (redis, [lock, claim], [token]) => {
    if (redis.get(lock!) !== token) return 0;
    const ttl = redis.pttl(lock!);
    if (ttl <= 0) return 0;
    redis.set(claim!, token!, 'PX', String(ttl));
    return 1;
  },
);

/** Claims `lockKey` for the build of `token`, its holder: 1, or 0 when it does not hold it. */
export function claimLock(
  client: RedisScriptClient,
  lockKey: string,
  token: string,
): Promise<unknown> {
  return runScript(client, CLAIM, [lockKey, claimKey(lockKey)], [token]);
}
