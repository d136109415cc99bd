import { isMemoryUrl, type MemoryUrl } from '../memory/memory-url.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { MESSAGE_IDS, type MessageCatalog, type MessageId } from '../messages/messages.catalog.js';
import {
  isNodeRedisClient,
  looksLikeNodeRedis,
  type NodeRedisConnection,
} from '../redis/node-redis-client.js';
import { Rule, Seconds, validateOptions } from './validate-options.js';

/**
 * What the lock needs from a Redis client: `eval(script, numkeys, ...args)`, as ioredis `Redis`
 * and `Cluster` have. `evalsha` is used when present, falling back to `eval` on NOSCRIPT.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * const client: RedisScriptClient = new Redis();
 * ```
 */
export interface RedisScriptClient {
  eval(script: string, numkeys: number, ...args: (string | number)[]): unknown;
  evalsha?(sha: string, numkeys: number, ...args: (string | number)[]): unknown;
  /**
   * Optional: `SET key value PX ms NX`, answering `'OK'` or `null` (ioredis has it). When present,
   * acquire sends it directly instead of running it inside a Lua script.
   */
  set?(key: string, value: string, px: 'PX', milliseconds: number, nx: 'NX'): unknown;
}

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
const fieldOf = (value: object, name: string): unknown => {
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

const isMessageCatalog = (value: unknown): boolean => {
  try {
    return (
      value === undefined ||
      (typeof value === 'object' &&
        value !== null &&
        !Array.isArray(value) &&
        Object.entries(value).every(
          ([id, text]) => MESSAGE_IDS.includes(id as MessageId) && typeof text === 'string',
        ))
    );
  } catch {
    // A getter or Proxy trap that throws: no catalog.
    return false;
  }
};

/**
 * The declaration of the lock's options: for each one its type, its default (the initializer),
 * its rule and the message id it is refused with.
 *
 * @example
 * ```ts
 * new RedisLockOptionsDto().namespace; // 'buffer:lock:'
 * validateOptions(RedisLockOptionsDto, { redis: 'memory://', ttl: '30' }, messages).ttl; // 30
 * ```
 */
export class RedisLockOptionsDto {
  /**
   * A client: ioredis `Redis` or `Cluster`, iovalkey, a node-redis client or cluster, or any
   * minimal {@link RedisScriptClient} with `eval()`; (better) a factory returning one; or
   * `'memory://'` for the in-memory backend (no Redis, this process only). Required.
   */
  @Rule(
    'redis_client_invalid',
    (v) => isScriptClient(v) || typeof v === 'function' || isMemoryUrl(v),
  )
  redis: unknown;

  /** The prefix of every Redis key. Non-empty; keep it ASCII. Default `'buffer:lock:'`. */
  @Rule('redis_namespace_invalid', (v) => typeof v === 'string' && v.length > 0)
  namespace: string = 'buffer:lock:';

  /** Seconds a lock lives in Redis. Positive; fractions allowed. Default `60`. */
  @Seconds('redis_ttl_invalid')
  ttl: number = 60;

  /** Message overrides by message id. Any characters, emoji included. */
  @Rule('redis_messages_invalid', isMessageCatalog)
  messages?: MessageCatalog = undefined;

  /**
   * Number every acquire of a key with a fencing token (`guard.fence`, strictly increasing per
   * key, from a counter in the lock's hash slot). Default `false`.
   */
  @Rule('redis_fencing_invalid', (v) => typeof v === 'boolean')
  fencing: boolean = false;

  /**
   * Seconds a factory's promise may take to give the client. A call still waiting then fails
   * with `redis_connect_timeout`, and the next call asks the factory again (a client it gives
   * later is not used). Positive; fractions allowed. Default `10`.
   */
  @Seconds('redis_connect_timeout_invalid')
  connectTimeout: number = 10;
}

/**
 * The options of {@link RedisLockService}. Seconds may also be given as decimal strings (`'30'`).
 *
 * @example
 * ```ts
 * const options: RedisLockOptions = {
 *   redis: () => new Redis(process.env.REDIS_URL!),
 *   namespace: 'shop:buffer:',
 *   ttl: 30,
 * };
 * ```
 */
export type RedisLockOptions = Partial<Omit<RedisLockOptionsDto, 'redis'>> & {
  /**
   * A client (ioredis, iovalkey, node-redis, or anything with `eval()`), (better) a factory
   * returning one, or `'memory://'` (`'memory://NAME'` to share one keyspace between services of
   * this process): no Redis, this process only. Required.
   */
  redis: LockClient | RedisClientFactory | MemoryUrl;
};

/**
 * The lock's options after validation: defaults filled in, `ttl` a number.
 *
 * @example
 * ```ts
 * const options: ResolvedLockOptions = resolveLockOptions({ redis: 'memory://', ttl: 30 });
 * options.namespace; // 'buffer:lock:'
 * ```
 */
export type ResolvedLockOptions = Readonly<RedisLockOptions & Omit<RedisLockOptionsDto, 'redis'>>;

/**
 * Validates lock options and fills in the defaults. Throws a `BufferLockConfigError` whose
 * `message` is the catalog text of the violation (of every one, line by line).
 *
 * @example
 * ```ts
 * const options = resolveLockOptions({ redis: () => new Redis(), ttl: 30 });
 * options.connectTimeout; // 10
 * resolveLockOptions({ redis: 'memory://', ttl: -1 }); // throws: redis_ttl_invalid
 * ```
 */
export function resolveLockOptions(
  input: RedisLockOptions,
  messages: BufferLockMessages = new BufferLockMessages({ messages: safeCatalog(input) }),
): ResolvedLockOptions {
  return validateOptions(RedisLockOptionsDto, input, messages) as ResolvedLockOptions;
}

/**
 * The overrides in `input`, or none when they are themselves invalid.
 *
 * @example
 * ```ts
 * safeCatalog({ messages: { redis_lock_failed: 'x' } }); // { redis_lock_failed: 'x' }
 * safeCatalog({ messages: { no_such_id: 'x' } }); // undefined
 * ```
 */
export function safeCatalog(input: unknown): MessageCatalog | undefined {
  const catalog =
    typeof input === 'object' && input !== null ? fieldOf(input, 'messages') : undefined;
  return isMessageCatalog(catalog) ? (catalog as MessageCatalog | undefined) : undefined;
}
