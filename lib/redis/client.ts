import type { RedisScriptClient } from '../types/clients.js';

/**
 * Makes the client on first use (once per process); it may return a promise.
 *
 * @example
 * ```ts
 * const factory: RedisClientFactory = () => new Redis(process.env.REDIS_URL!);
 * ```
 */
export type RedisClientFactory = () =>
  LockClient | null | undefined | Promise<LockClient | null | undefined>;

/**
 * A client the lock takes: ioredis, iovalkey or anything with `eval()`, or a node-redis client or
 * cluster (the `redis` package), told apart by these members.
 *
 * @example
 * ```ts
 * const client: LockClient = new Redis(process.env.REDIS_URL!);
 * ```
 */
export type LockClient =
  | RedisScriptClient
  | {
      readonly isOpen: boolean;
      sendCommand(...args: never[]): unknown;
      evalSha(...args: never[]): unknown;
      sSubscribe(...args: never[]): unknown;
    };

/** `value[name]`, or `undefined` when reading it throws (a getter or a Proxy trap). */
export const fieldOf = (value: object, name: string): unknown => {
  try {
    return (value as Record<string, unknown>)[name];
  } catch {
    return undefined;
  }
};

/** ioredis `Redis` or `Cluster`, or a fork of that shape (iovalkey): only these get pipelines. */
export const isIoredisClient = (value: unknown): boolean => {
  if (typeof value !== 'object' || value === null) return false;
  const options = fieldOf(value, 'options');
  return (
    typeof fieldOf(value, 'eval') === 'function' &&
    typeof fieldOf(value, 'pipeline') === 'function' &&
    typeof options === 'object' &&
    options !== null &&
    typeof fieldOf(value, 'status') === 'string' &&
    typeof fieldOf(value, 'isCluster') === 'boolean'
  );
};

const looksLikeNodeRedis = (value: object): boolean =>
  typeof fieldOf(value, 'sendCommand') === 'function' &&
  typeof fieldOf(value, 'isOpen') === 'boolean';

const NODE_REDIS_METHODS = [
  'eval',
  'evalSha',
  'set',
  'duplicate',
  'connect',
  'destroy',
  'sSubscribe',
  'sUnsubscribe',
  'on',
  'off',
] as const;

/** A node-redis client or cluster (v5, v6) with every method the library calls. */
export const isNodeRedisClient = (value: unknown): boolean =>
  typeof value === 'object' &&
  value !== null &&
  looksLikeNodeRedis(value) &&
  NODE_REDIS_METHODS.every((name) => typeof fieldOf(value, name) === 'function');

/**
 * ioredis or a fork, node-redis, or any other object with `eval()`. Something shaped like
 * node-redis that lacks a method it needs is refused: its `eval()` takes other arguments.
 */
export const isScriptClient = (value: unknown): value is LockClient =>
  typeof value === 'object' &&
  value !== null &&
  typeof fieldOf(value, 'eval') === 'function' &&
  (isIoredisClient(value) || isNodeRedisClient(value) || !looksLikeNodeRedis(value));

/** ioredis's `status` is `'ready'`; a client without one (or whose getter throws) is not. */
export function isConnected(client: unknown): boolean {
  try {
    return (client as { status?: unknown } | null | undefined)?.status === 'ready';
  } catch {
    return false;
  }
}
