import type { RedisScriptClient } from '../types/clients.js';
import {
  isNodeRedisClient,
  looksLikeNodeRedis,
  type NodeRedisConnection,
} from './node-redis-client.js';

/**
 * A function that makes the client, called on first use (once per process). It may return a
 * promise.
 *
 * @example
 * ```ts
 * const factory: RedisClientFactory = () => new Redis(process.env.REDIS_URL!);
 * ```
 */
export type RedisClientFactory = () =>
  LockClient | null | undefined | Promise<LockClient | null | undefined>;

/**
 * A client the lock takes: a {@link RedisScriptClient} (ioredis, iovalkey, or anything with
 * `eval()`), or a node-redis client or cluster.
 *
 * @example
 * ```ts
 * const client: LockClient = await createClient({ url: process.env.REDIS_URL }).connect();
 * ```
 */
export type LockClient = RedisScriptClient | NodeRedisConnection;

/** `value[name]`, or `undefined` when reading it throws (a getter or a Proxy trap). */
export const fieldOf = (value: object, name: string): unknown => {
  try {
    return (value as Record<string, unknown>)[name];
  } catch {
    return undefined;
  }
};

/**
 * Whether `value` is an ioredis `Redis` or `Cluster`, or a fork with their shape (iovalkey, for
 * one): `eval()` and `pipeline()` methods, an `options` object, a `status` string and an
 * `isCluster` flag. Only such a client is sent pipelines.
 *
 * @example
 * ```ts
 * isIoredisClient(new Redis()); // true
 * isIoredisClient(createClient()); // false: node-redis
 * ```
 */
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

/**
 * Whether `value` is a client the lock can drive: an ioredis client or fork
 * ({@link isIoredisClient}), a node-redis client or cluster (`createClient()`, `createCluster()`
 * of the `redis` package, with every method the lock calls), or any other object with `eval()`
 * (the minimal {@link RedisScriptClient}). Something shaped like node-redis that lacks one of the
 * methods it needs is refused: its `eval()` takes other arguments than the minimal interface's.
 *
 * @example
 * ```ts
 * isScriptClient(new Redis()); // true
 * isScriptClient(createClient()); // true: node-redis
 * isScriptClient({ eval: () => 0 }); // true: the minimal client
 * isScriptClient({ eval: () => 0, sendCommand: () => 0, isOpen: true }); // false
 * ```
 */
export const isScriptClient = (value: unknown): value is LockClient =>
  typeof value === 'object' &&
  value !== null &&
  typeof fieldOf(value, 'eval') === 'function' &&
  (isIoredisClient(value) || isNodeRedisClient(value) || !looksLikeNodeRedis(value));
