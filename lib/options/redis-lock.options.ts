import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { MESSAGE_IDS, type MessageCatalog, type MessageId } from '../messages/messages.catalog.js';
import { parseSeconds } from './seconds.js';
import { Rule, validateOptions } from './validate-options.js';

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
  RedisScriptClient | null | undefined | Promise<RedisScriptClient | null | undefined>;

/**
 * The options of {@link RedisLockService}, as in the spec's ATTRIBUTES.
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
export interface RedisLockOptions {
  /** A client with `eval()`, or (better) a factory returning one. Required. */
  redis: RedisScriptClient | RedisClientFactory;
  /** The prefix of every Redis key. Non-empty; keep it ASCII. Default `'buffer:lock:'`. */
  namespace?: string;
  /** Seconds a lock lives in Redis. Positive; fractions allowed. Default `60`. */
  ttl?: number;
  /** Message overrides by message id. Any characters, emoji included. */
  messages?: MessageCatalog;
  /**
   * Beyond the spec: number every acquire of a key with a fencing token (`guard.fence`, strictly
   * increasing per key, from a counter in the lock's hash slot). Default `false`.
   */
  fencing?: boolean;
}

/**
 * The lock's defaults: the one place they are written down.
 *
 * @example
 * ```ts
 * LOCK_DEFAULTS.ttl; // 60
 * ```
 */
export const LOCK_DEFAULTS = Object.freeze({ namespace: 'buffer:lock:', ttl: 60, fencing: false });

const isClient = (value: unknown): value is RedisScriptClient =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as Partial<RedisScriptClient>).eval === 'function';

const isMessageCatalog = (value: unknown): boolean =>
  value === undefined ||
  (typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    Object.entries(value).every(
      ([id, text]) => MESSAGE_IDS.includes(id as MessageId) && typeof text === 'string',
    ));

/** The class-validator DTO for {@link RedisLockOptions}. */
export class RedisLockOptionsDto {
  @Rule(
    'isRedisClientOrFactory',
    'redis_client_invalid',
    (v) => isClient(v) || typeof v === 'function',
  )
  redis!: RedisScriptClient | RedisClientFactory;

  @Rule('isNonEmptyString', 'redis_namespace_invalid', (v) => typeof v === 'string' && v.length > 0)
  namespace!: string;

  @Rule('isPositiveSeconds', 'redis_ttl_invalid', (v) => parseSeconds(v) !== undefined)
  ttl!: number;

  @Rule('isMessageCatalog', 'redis_messages_invalid', isMessageCatalog)
  messages?: MessageCatalog;

  @Rule('isBoolean', 'redis_fencing_invalid', (v) => typeof v === 'boolean')
  fencing!: boolean;
}

/**
 * Options after validation, with defaults filled in and `ttl` a number.
 *
 * @example
 * ```ts
 * const resolved: ResolvedLockOptions = resolveLockOptions({ redis: client });
 * resolved.ttl; // 60
 * ```
 */
export type ResolvedLockOptions = Required<Omit<RedisLockOptions, 'messages'>> &
  Pick<RedisLockOptions, 'messages'>;

/**
 * Validates lock options by the spec's rules and fills in the defaults. Throws a
 * `BufferLockConfigError` whose `message` is the catalog text of the first violation.
 *
 * @example
 * ```ts
 * resolveLockOptions({ redis: () => new Redis(), ttl: '30' }).ttl; // 30
 * ```
 */
export function resolveLockOptions(
  input: RedisLockOptions,
  messages: BufferLockMessages = new BufferLockMessages({ messages: safeCatalog(input) }),
): ResolvedLockOptions {
  const dto = validateOptions(RedisLockOptionsDto, input, LOCK_DEFAULTS, messages);
  return {
    redis: dto.redis,
    namespace: dto.namespace,
    ttl: parseSeconds(dto.ttl)!,
    messages: dto.messages,
    fencing: dto.fencing,
  };
}

/** The overrides in `input`, or none when they are themselves invalid. */
export function safeCatalog(input: unknown): MessageCatalog | undefined {
  const catalog = (input as { messages?: unknown } | null | undefined)?.messages;
  return isMessageCatalog(catalog) ? (catalog as MessageCatalog | undefined) : undefined;
}
