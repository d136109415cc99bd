import { createHash } from 'node:crypto';
import type { RedisScriptClient } from '../types/clients.js';

// The commands a script's JavaScript twin may call, with Redis's replies and error texts: what the
// keyspace of `memory://` offers. Arguments are strings, as Lua's KEYS and ARGV are.
export interface ScriptCommands {
  get(key: string): string | null;
  set(key: string, value: string, ...options: string[]): 'OK' | null;
  del(key: string): number;
  pexpire(key: string, milliseconds: string): number;
  pttl(key: string): number;
  incr(key: string): number;
  spublish(channel: string, message: string): number;
  /** Seconds and microseconds since the epoch, as decimal text. */
  time(): [string, string];
}

// The same steps as the Lua script, in one synchronous call (so as atomic), Lua's nil as null.
export type ScriptTwin = (
  redis: ScriptCommands,
  keys: readonly string[],
  args: readonly string[],
) => unknown;

export interface LuaScript {
  readonly source: string;
  readonly sha: string;
  readonly twin: ScriptTwin;
}

/** Every script defined so far, by SHA1: what the in-memory backend can run. */
const DEFINED = new Map<string, LuaScript>();

/** A constant Lua source (values only through KEYS and ARGV) and its twin. */
export function luaScript(source: string, twin: ScriptTwin): LuaScript {
  const script = { source, sha: createHash('sha1').update(source).digest('hex'), twin };
  DEFINED.set(script.sha, script);
  return script;
}

export function definedScript(sha: string): LuaScript | undefined {
  return DEFINED.get(sha);
}

/** A thrown value that cannot be inspected is no NOSCRIPT. */
const isNoScript = (error: unknown): boolean => {
  try {
    return error instanceof Error && String(error.message).startsWith('NOSCRIPT');
  } catch {
    return false;
  }
};

/**
 * EVALSHA, and EVAL when the client has no evalsha or Redis answers NOSCRIPT (a restart, a
 * fail-over, SCRIPT FLUSH). Never throws, and never changes the client.
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
