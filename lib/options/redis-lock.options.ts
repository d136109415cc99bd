import { isMemoryUrl, type MemoryUrl } from '../memory/memory-url.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { MESSAGE_IDS, type MessageCatalog, type MessageId } from '../messages/messages.catalog.js';
import {
  fieldOf,
  isScriptClient,
  type LockClient,
  type RedisClientFactory,
} from '../redis/client.js';
import { Rule, Seconds, validateOptions } from './validate-options.js';

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
   * minimal `RedisScriptClient` with `eval()`; (better) a factory returning one; or
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
