import { createHash } from 'node:crypto';
import type { RedisScriptClient } from '../types/clients.js';

/**
 * The Redis commands a script's JavaScript twin may call, each with Redis's reply: what the
 * in-process keyspace of `memory://` offers. Arguments are strings, as Lua's KEYS and ARGV are; a
 * command Redis would refuse throws an error with Redis's text (`ERR value is not an integer or
 * out of range`).
 *
 * @example
 * ```ts
 * const twin: ScriptTwin = (redis, keys) => redis.get(keys[0]!);
 * ```
 */
export interface ScriptCommands {
  /** GET: the string, or `null` when there is none. */
  get(key: string): string | null;
  /** SET with NX, XX, PX or EX: `'OK'`, or `null` when NX or XX kept it from being set. */
  set(key: string, value: string, ...options: string[]): 'OK' | null;
  /** DEL of one key: 1 when it was there, else 0. */
  del(key: string): number;
  /** PEXPIRE: 1 when the key is there (a time not in the future deletes it), else 0. */
  pexpire(key: string, milliseconds: string): number;
  /** PTTL: milliseconds left, -1 without expiry, -2 when the key is gone. */
  pttl(key: string): number;
  /** INCR: the new value; a missing key counts from 0 and keeps no expiry. */
  incr(key: string): number;
  /** SPUBLISH: how many subscribers of `channel` it reached. */
  spublish(channel: string, message: string): number;
}

/**
 * The JavaScript twin of a Lua script: the same steps on {@link ScriptCommands}, with `keys` and
 * `args` as KEYS and ARGV (counted from 0 here, from 1 in Lua), answering what the script answers
 * (Lua's nil as `null`). It runs in one synchronous call, so it is atomic as the script is.
 *
 * @example
 * ```ts
 * const twin: ScriptTwin = (redis, keys, args) => redis.set(keys[0]!, args[0]!, 'PX', args[1]!);
 * ```
 */
export type ScriptTwin = (
  redis: ScriptCommands,
  keys: readonly string[],
  args: readonly string[],
) => unknown;

/**
 * A Lua script with its SHA1, run by EVALSHA with an EVAL fallback, and its JavaScript twin for
 * the in-memory backend. Scripts take every value through KEYS and ARGV; their source is constant
 * text, never built by interpolation.
 *
 * @example
 * ```ts
 * const PTTL: LuaScript = luaScript(`return redis.call('PTTL', KEYS[1])`, (redis, [key]) =>
 *   redis.pttl(key!),
 * );
 * PTTL.sha; // the hex SHA1 of PTTL.source
 * ```
 */
export interface LuaScript {
  readonly source: string;
  readonly sha: string;
  readonly twin: ScriptTwin;
}

/** Every script defined so far, by SHA1: what the in-memory backend can run. */
const DEFINED = new Map<string, LuaScript>();

/**
 * Pairs a constant Lua source with its SHA1 and its JavaScript twin (kept next to the source, so
 * that each script's meaning lives in one place).
 *
 * @example
 * ```ts
 * const GET = luaScript(`return redis.call('GET', KEYS[1])`, (redis, keys) => redis.get(keys[0]!));
 * ```
 */
export function luaScript(source: string, twin: ScriptTwin): LuaScript {
  const script = { source, sha: createHash('sha1').update(source).digest('hex'), twin };
  DEFINED.set(script.sha, script);
  return script;
}

/**
 * The script the library defined with this SHA1, or `undefined`.
 *
 * @example
 * ```ts
 * const script = definedScript(sha); // what EVALSHA sha would run
 * ```
 */
export function definedScript(sha: string): LuaScript | undefined {
  return DEFINED.get(sha);
}

/** Whether Redis answered NOSCRIPT; a thrown value that cannot be inspected did not. */
const isNoScript = (error: unknown): boolean => {
  try {
    return error instanceof Error && String(error.message).startsWith('NOSCRIPT');
  } catch {
    return false;
  }
};

/**
 * Runs `script` by EVALSHA when the client has it, and by EVAL when it has not or when Redis
 * answers NOSCRIPT (a restarted server, a fail-over, SCRIPT FLUSH). It only calls the client's
 * methods; it never defines commands on the client or changes it in any other way. Never throws:
 * a client that throws, or answers with no promise, gives a rejected or resolved promise.
 *
 * @example
 * ```ts
 * const ms = await runScript(client, PTTL, ['buffer:lock:9a03'], []); // -2 when the key is gone
 * await runScript(client, EXTEND, [guard.key], [guard.token, 30_000]);
 * ```
 */
export function runScript(
  client: RedisScriptClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  if (typeof client.evalsha !== 'function') return evalScript(client, script, keys, args);
  let sent: unknown;
  try {
    sent = client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (error) {
    return isNoScript(error) ? evalScript(client, script, keys, args) : Promise.reject(error);
  }
  // Chained rather than awaited: one promise and one microtask turn less per lock command.
  return Promise.resolve(sent).then(undefined, (error: unknown) => {
    if (!isNoScript(error)) throw error;
    return evalScript(client, script, keys, args);
  });
}

/** `script` by EVAL, as a promise: a client that throws gives a rejection. */
function evalScript(
  client: RedisScriptClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  try {
    return Promise.resolve(client.eval(script.source, keys.length, ...keys, ...args));
  } catch (error) {
    return Promise.reject(error);
  }
}
