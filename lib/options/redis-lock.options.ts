import type { SecondsOption } from './seconds.js';
import { isMemoryUrl } from '../memory/memory-url.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { MESSAGE_IDS, type MessageId } from '../messages/messages.catalog.js';
import {
  fieldOf,
  isScriptClient,
  type LockClient,
  type RedisClientFactory,
} from '../redis/client.js';
import { attempt } from '../messages/error-text.js';
import { Rule, Seconds, validateOptions } from './validate-options.js';

const isMessageCatalog = (value: unknown): boolean =>
  value === undefined ||
  (typeof value === 'object' &&
    value !== null &&
    attempt(
      () =>
        !Array.isArray(value) &&
        Object.entries(value).every(
          ([id, text]) => MESSAGE_IDS.includes(id as MessageId) && typeof text === 'string',
        ),
      false,
    ));

/**
 * The options of `RedisLockService`; seconds are numbers. `redis`: a client (ioredis, iovalkey,
 * node-redis, or anything with `eval()`), better a factory returning one, or `'memory://'`
 * (`'memory://NAME'` to share a keyspace in this process): no Redis.
 *
 * @example
 * ```ts
 * const options: RedisLockOptions = { redis: () => new Redis(process.env.REDIS_URL!), ttl: 30 };
 * ```
 */
export interface RedisLockOptions {
  redis: LockClient | RedisClientFactory | `memory://${string}`;
  /** The prefix of every Redis key. Non-empty; keep it ASCII. Default `'buffer:lock:'`. */
  namespace?: string;
  /** Seconds a lock lives in Redis. Default `60`. */
  ttl?: SecondsOption;
  /** Message overrides by message id. */
  messages?: Partial<Record<MessageId, string>>;
  /** Number every acquire of a key with a strictly increasing `guard.fence`. Default `false`. */
  fencing?: boolean;
  /** Seconds a factory may take to give the client; the next call asks again. Default `10`. */
  connectTimeout?: SecondsOption;
  /**
   * Seconds `close()` (and the module at shutdown) waits for the locks this process holds to be
   * released by their holders, before it releases them itself; `0`: at once. Default `5`.
   */
  shutdownTimeout?: SecondsOption;
}

// The rules and defaults of `RedisLockOptions`, each refused with its own message id.
export class RedisLockOptionsDto implements Omit<RedisLockOptions, 'redis'> {
  @Rule(
    'redis_client_invalid',
    (v) => isScriptClient(v) || typeof v === 'function' || isMemoryUrl(v),
  )
  redis: unknown;

  @Rule('redis_namespace_invalid', (v) => typeof v === 'string' && v.length > 0)
  namespace: string = 'buffer:lock:';

  @Seconds('redis_ttl_invalid', { timed: true })
  ttl: number = 60;

  @Rule('redis_messages_invalid', isMessageCatalog)
  messages?: Partial<Record<MessageId, string>> = undefined;

  @Rule('redis_fencing_invalid', (v) => typeof v === 'boolean')
  fencing: boolean = false;

  @Seconds('redis_connect_timeout_invalid', { timed: true })
  connectTimeout: number = 10;

  @Seconds('shutdown_timeout_invalid', { orZero: true, timed: true })
  shutdownTimeout: number = 5;
}

export type ResolvedLockOptions = Readonly<RedisLockOptions & Omit<RedisLockOptionsDto, 'redis'>>;

export function resolveLockOptions(
  input: RedisLockOptions,
  messages: BufferLockMessages,
): ResolvedLockOptions {
  return validateOptions(RedisLockOptionsDto, input, messages) as ResolvedLockOptions;
}

/** The overrides in `input`, or none when they are themselves invalid (so that they still render). */
export function safeCatalog(input: unknown): Partial<Record<MessageId, string>> | undefined {
  const catalog =
    typeof input === 'object' && input !== null ? fieldOf(input, 'messages') : undefined;
  return isMessageCatalog(catalog)
    ? (catalog as Partial<Record<MessageId, string>> | undefined)
    : undefined;
}
