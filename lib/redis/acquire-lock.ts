import type { RedisScriptClient } from '../types/clients.js';
import { luaScript, runScript } from './lua-script.js';

// SET NX answers nil when the key exists; Lua sees that as false. For clients with eval() only.
const ACQUIRE = luaScript(
  `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
return 0
`,
  (redis, [key], [token, ms]) => (redis.set(key!, token!, 'NX', 'PX', ms!) === null ? 0 : 1),
);

/**
 * What a SET answered that it never answers: the caller reads it as a bad reply. A SET reply such
 * as the number 1 must not pass on as the script's "taken".
 *
 * @example
 * ```ts
 * const client = { eval: () => 0, set: () => 1 }; // a SET that answers 1
 * await acquireLock(client, 'buffer:lock:9a03', createToken(), 30_000); // UNEXPECTED_SET_REPLY
 * ```
 */
export const UNEXPECTED_SET_REPLY: unique symbol = Symbol('unexpected SET reply');

/** What `SET key token PX ms NX` answers: `'OK'` when set, `null` when the key exists. */
const fromSetReply = (reply: unknown): unknown =>
  reply === 'OK' ? 1 : reply === null ? 0 : reply === undefined ? undefined : UNEXPECTED_SET_REPLY;

/**
 * Sets `key` to `token` for `ttlMs` milliseconds unless the key exists, in one atomic step.
 * Resolves 1 when the lock was taken, 0 when it is held, and whatever a misbehaving client
 * answered otherwise ({@link UNEXPECTED_SET_REPLY} for a SET reply other than `'OK'` or `null`;
 * the caller treats a missing or unexpected answer as an error).
 *
 * A client with `set()` (ioredis, node-redis adapters) is sent the plain `SET … NX PX`: the same
 * single atomic command the script would run, without the cost of a Lua call on the server. A
 * client with only `eval()` (all that `RedisScriptClient` requires) runs it through the script.
 *
 * @example
 * ```ts
 * const answer = await acquireLock(client, 'buffer:lock:9a03', createToken(), 30_000);
 * if (answer === 1) console.log('taken'); // 0: another holder has it
 * ```
 */
export function acquireLock(
  client: RedisScriptClient,
  key: string,
  token: string,
  ttlMs: number,
): Promise<unknown> {
  if (typeof client.set === 'function') {
    // Promise.resolve: a misbehaving client may answer with no promise, or nothing at all.
    return Promise.resolve(client.set(key, token, 'PX', ttlMs, 'NX')).then(fromSetReply);
  }
  return runScript(client, ACQUIRE, [key], [token, ttlMs]);
}
