import { createHash } from 'node:crypto';
import type { RedisScriptClient } from '../options/redis-lock.options.js';

/**
 * A Lua script with its SHA1, run by EVALSHA with an EVAL fallback. Scripts take every value
 * through KEYS and ARGV; their source is constant text, never built by interpolation.
 */
export interface LuaScript {
  readonly source: string;
  readonly sha: string;
}

/** Pairs a constant Lua source with its SHA1. */
export function luaScript(source: string): LuaScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') };
}

const isNoScript = (error: unknown): boolean =>
  error instanceof Error && error.message.startsWith('NOSCRIPT');

/**
 * Runs `script` by EVALSHA when the client has it, and by EVAL when it has not or when Redis
 * answers NOSCRIPT (a restarted server, a fail-over, SCRIPT FLUSH). It only calls the client's
 * methods; it never defines commands on the client or changes it in any other way.
 */
export async function runScript(
  client: RedisScriptClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  if (typeof client.evalsha === 'function') {
    try {
      return await client.evalsha(script.sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (!isNoScript(error)) throw error;
    }
  }
  return await client.eval(script.source, keys.length, ...keys, ...args);
}
