import { Logger, type LoggerService } from '@nestjs/common';
import type { RedisOptions } from 'ioredis';
import type { BufferLockMessages, MessageSettings } from '../messages/buffer-lock-messages.js';
import type { MessageCatalog } from '../messages/messages.catalog.js';
import type { ResultSerializer } from '../serialization/result-serializer.js';
import {
  CIRCUIT_BREAKER_DEFAULTS,
  type CircuitBreakerOptions,
} from '../single-flight/circuit-breaker.js';
import type { LockLostEvent } from '../single-flight/watchdog.js';
import {
  LOCK_DEFAULTS,
  RedisLockOptionsDto,
  safeCatalog,
  type RedisClientFactory,
  type RedisLockOptions,
  type RedisScriptClient,
} from './redis-lock.options.js';
import { parseSeconds } from './seconds.js';
import { Rule, validateOptions } from './validate-options.js';

/**
 * What a `@SingleFlight` call does when another worker holds the lock: `'wait'` for it (up to
 * `lockTimeout`), `'skip'` the call (resolve `undefined`), or `'throw'` a `LockBusyError` (409).
 *
 * @example
 * ```ts
 * const onBusy: OnBusy = 'skip';
 * ```
 */
export type OnBusy = 'wait' | 'skip' | 'throw';

/**
 * Every {@link OnBusy} mode, in documentation order.
 *
 * @example
 * ```ts
 * ON_BUSY_MODES.includes('wait'); // true
 * ```
 */
export const ON_BUSY_MODES: readonly OnBusy[] = Object.freeze(['wait', 'skip', 'throw']);

/**
 * What a `@SingleFlight` call does when Redis cannot be asked (error, timeout, open breaker):
 * `'proceed'` runs the method without a cross-worker lock (the spec's fail-open, logged rate
 * limited), `'throw'` rejects with a `RedisUnavailableError` (HTTP 503).
 *
 * @example
 * ```ts
 * const onRedisError: OnRedisError = 'throw';
 * ```
 */
export type OnRedisError = 'proceed' | 'throw';

/**
 * Every {@link OnRedisError} mode.
 *
 * @example
 * ```ts
 * ON_REDIS_ERROR_MODES.includes('proceed'); // true
 * ```
 */
export const ON_REDIS_ERROR_MODES: readonly OnRedisError[] = Object.freeze(['proceed', 'throw']);

/**
 * The circuit breaker's numbers (see `CircuitBreaker`), or `false` for no breaker.
 *
 * @example
 * ```ts
 * const breaker: CircuitBreakerSettings = { failureThreshold: 3, openSeconds: 5, probes: 1 };
 * ```
 */
export type CircuitBreakerSettings =
  Pick<CircuitBreakerOptions, 'failureThreshold' | 'openSeconds' | 'probes'> | false;

/**
 * How the module reaches Redis: a client object (left alone at shutdown), a factory (called once
 * per process; its client is quit at shutdown), a `redis://` / `rediss://` URL or an ioredis options
 * object (the module makes the client on first use and quits it at shutdown).
 *
 * @example
 * ```ts
 * const connection: RedisConnection = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
 * ```
 */
export type RedisConnection = RedisScriptClient | RedisClientFactory | string | RedisOptions;

/**
 * The options of `BufferLockModule`: the lock's options plus the single-flight and message
 * settings. Seconds may also be given as decimal strings (`'30'`), as environment config delivers
 * them; anything else that is not a positive decimal number is rejected.
 *
 * @example
 * ```ts
 * const options: BufferLockOptions = {
 *   redis: () => new Redis(process.env.REDIS_URL!),
 *   namespace: 'shop:buffer:',
 *   ttl: 30,
 *   lockTimeout: 10,
 * };
 * ```
 */
export interface BufferLockOptions extends Omit<RedisLockOptions, 'redis'> {
  /** See {@link RedisConnection}. Required. */
  redis: RedisConnection;
  /** Seconds a `@SingleFlight` caller waits for the holder (cache_lock_timeout). Below `ttl`. */
  lockTimeout?: number;
  /** What a `@SingleFlight` call does when the lock is busy. Default `'wait'`. */
  onBusy?: OnBusy;
  /** The catalog to render texts from, by its name in `catalogs`. Default `'en'`. */
  locale?: string;
  /** Extra catalogs by locale; ids a catalog leaves out fall back to English. */
  catalogs?: Readonly<Record<string, MessageCatalog>>;
  /** Where log lines go. Default `new Logger('BufferLock')`. */
  logger?: LoggerService;
  /** Seconds between two log lines with the same message id; the rest are counted. Default 10. */
  logInterval?: number;
  /**
   * Share the leader's result with the waiters of other processes, so they do not run the method.
   * Default `false`; each `@SingleFlight` may set it.
   */
  share?: boolean;
  /** How results are shared (`share: true`). Default JSON (`JSON_RESULT_SERIALIZER`). */
  serializer?: ResultSerializer;
  /** What a call does when Redis cannot be asked. Default `'proceed'` (fail-open). */
  onRedisError?: OnRedisError;
  /**
   * Seconds a `@SingleFlight` method may hold its lock in all: the watchdog extends the lock every
   * ttl/3 while the method runs, up to this cap. Default: no cap.
   */
  maxHold?: number;
  /** Called when a running method's lock was lost (besides the engine's `'lockLost'` event). */
  onLockLost?: (event: LockLostEvent) => void;
  /** The circuit breaker in front of Redis. Default `CIRCUIT_BREAKER_DEFAULTS`; `false`: none. */
  circuitBreaker?: CircuitBreakerSettings;
}

/**
 * The module's defaults: the lock's (`LOCK_DEFAULTS`) plus the module's own. The one place they
 * are written down. `logger` defaults to `new Logger('BufferLock')`.
 *
 * @example
 * ```ts
 * BUFFER_LOCK_DEFAULTS.lockTimeout; // 10
 * ```
 */
export const BUFFER_LOCK_DEFAULTS = Object.freeze({
  ...LOCK_DEFAULTS,
  lockTimeout: 10,
  onBusy: 'wait' as OnBusy,
  locale: 'en',
  logInterval: 10,
  share: false,
  onRedisError: 'proceed' as OnRedisError,
  circuitBreaker: CIRCUIT_BREAKER_DEFAULTS as CircuitBreakerSettings,
});

/**
 * The validated module options, with defaults filled in, seconds as numbers, and `redis` turned
 * into a client or a factory. This is what `BUFFER_LOCK_OPTIONS` injects.
 *
 * @example
 * ```ts
 * constructor(@InjectBufferLockOptions() options: ResolvedBufferLockOptions) {
 *   console.log(options.lockTimeout); // 10
 * }
 * ```
 */
export interface ResolvedBufferLockOptions {
  readonly redis: RedisScriptClient | RedisClientFactory;
  readonly namespace: string;
  readonly ttl: number;
  readonly messages?: MessageCatalog;
  readonly lockTimeout: number;
  readonly onBusy: OnBusy;
  readonly locale: string;
  readonly catalogs?: Readonly<Record<string, MessageCatalog>>;
  readonly logger: LoggerService;
  readonly logInterval: number;
  readonly fencing: boolean;
  readonly share: boolean;
  readonly serializer?: ResultSerializer;
  readonly onRedisError: OnRedisError;
  readonly maxHold?: number;
  readonly onLockLost?: (event: LockLostEvent) => void;
  readonly circuitBreaker: CircuitBreakerSettings;
}

const isClient = (value: unknown): value is RedisScriptClient =>
  typeof value === 'object' &&
  value !== null &&
  typeof (value as Partial<RedisScriptClient>).eval === 'function';

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' &&
  value !== null &&
  [Object.prototype, null].includes(Object.getPrototypeOf(value));

/** True for the URL forms ioredis reads: redis://, rediss://, or a Unix socket path. */
const isRedisUrl = (value: unknown): value is string =>
  typeof value === 'string' && /^(rediss?:\/\/|\/)/.test(value);

const isRedisConnection = (value: unknown): boolean =>
  isClient(value) || typeof value === 'function' || isRedisUrl(value) || isPlainObject(value);

const isCatalog = (value: unknown): boolean =>
  value !== undefined && safeCatalog({ messages: value }) === value;

const isCatalogs = (value: unknown): boolean =>
  value === undefined || (isPlainObject(value) && Object.values(value).every(isCatalog));

const isLogger = (value: unknown): boolean =>
  value === undefined ||
  (typeof value === 'object' &&
    value !== null &&
    ['log', 'warn', 'error'].every(
      (method) => typeof (value as Record<string, unknown>)[method] === 'function',
    ));

const isNonEmptyString = (value: unknown): boolean => typeof value === 'string' && value !== '';

const isPositiveInteger = (value: unknown): boolean =>
  typeof value === 'number' && Number.isSafeInteger(value) && value > 0;

const isSerializer = (value: unknown): boolean =>
  value === undefined ||
  (typeof value === 'object' &&
    value !== null &&
    typeof (value as Partial<ResultSerializer>).serialize === 'function' &&
    typeof (value as Partial<ResultSerializer>).deserialize === 'function');

/** A rule on one field of `circuitBreaker`; only broken when the object itself is well formed. */
const breakerField =
  (field: 'failureThreshold' | 'openSeconds' | 'probes', test: (v: unknown) => boolean) =>
  (value: unknown): boolean =>
    !isPlainObject(value) || value[field] === undefined || test(value[field]);

const optional =
  (test: (value: unknown) => boolean) =>
  (value: unknown): boolean =>
    value === undefined || test(value);

/** A rule that is only broken when both `lockTimeout` and `ttl` are valid and out of order. */
const isShorterThanTtl = (value: unknown, args?: { object: object }): boolean => {
  const lockTimeout = parseSeconds(value);
  const ttl = parseSeconds((args?.object as { ttl?: unknown } | undefined)?.ttl);
  return lockTimeout === undefined || ttl === undefined || lockTimeout < ttl;
};

/**
 * The class-validator DTO for {@link BufferLockOptions}: the lock's rules plus the module's. Each
 * rule reports one catalog id; `resolveBufferLockOptions` runs them all.
 *
 * @example
 * ```ts
 * validateOptions(BufferLockOptionsDto, input, BUFFER_LOCK_DEFAULTS, messages);
 * ```
 */
export class BufferLockOptionsDto extends RedisLockOptionsDto {
  // The DTO's field type stays the base's; the rule also admits URLs and ioredis options.
  @Rule('isRedisConnection', 'module_redis_invalid', isRedisConnection)
  override redis!: RedisScriptClient | RedisClientFactory;

  @Rule('isPositiveSeconds', 'lock_timeout_invalid', (v) => parseSeconds(v) !== undefined)
  @Rule('isShorterThanTtl', 'lock_timeout_not_below_ttl', isShorterThanTtl)
  lockTimeout!: number;

  @Rule('isOnBusy', 'on_busy_invalid', (v) => ON_BUSY_MODES.includes(v as OnBusy))
  onBusy!: OnBusy;

  @Rule('isNonEmptyString', 'locale_invalid', isNonEmptyString)
  locale!: string;

  @Rule('isCatalogs', 'catalogs_invalid', isCatalogs)
  catalogs?: Record<string, MessageCatalog>;

  @Rule('isLogger', 'logger_invalid', isLogger)
  logger?: LoggerService;

  @Rule('isPositiveSeconds', 'log_interval_invalid', (v) => parseSeconds(v) !== undefined)
  logInterval!: number;

  @Rule('isBoolean', 'share_invalid', (v) => typeof v === 'boolean')
  share!: boolean;

  @Rule('isSerializer', 'serializer_invalid', isSerializer)
  serializer?: ResultSerializer;

  @Rule('isOnRedisError', 'on_redis_error_invalid', (v) =>
    ON_REDIS_ERROR_MODES.includes(v as OnRedisError),
  )
  onRedisError!: OnRedisError;

  @Rule('isPositiveSeconds', 'max_hold_invalid', optional((v) => parseSeconds(v) !== undefined))
  maxHold?: number;

  @Rule('isFunction', 'on_lock_lost_invalid', optional((v) => typeof v === 'function'))
  onLockLost?: (event: LockLostEvent) => void;

  @Rule('isCircuitBreaker', 'circuit_breaker_invalid', (v) => v === false || isPlainObject(v))
  @Rule(
    'isBreakerFailures',
    'breaker_failures_invalid',
    breakerField('failureThreshold', isPositiveInteger),
  )
  @Rule(
    'isBreakerOpenSeconds',
    'breaker_open_seconds_invalid',
    breakerField('openSeconds', (v) => parseSeconds(v) !== undefined),
  )
  @Rule('isBreakerProbes', 'breaker_probes_invalid', breakerField('probes', isPositiveInteger))
  circuitBreaker!: CircuitBreakerSettings;
}

/**
 * Validates module options and fills in {@link BUFFER_LOCK_DEFAULTS}. Throws one
 * `BufferLockConfigError` listing every violation in `messages`' words. `redis` is returned as
 * given (a URL stays a URL); the module turns it into a factory.
 *
 * @example
 * ```ts
 * const options = resolveBufferLockOptions({ redis: 'redis://127.0.0.1:6379', ttl: '30' }, messages);
 * options.ttl; // 30
 * ```
 */
export function resolveBufferLockOptions(
  input: BufferLockOptions,
  messages: BufferLockMessages,
): Omit<ResolvedBufferLockOptions, 'redis'> & { readonly redis: RedisConnection } {
  const dto = validateOptions(BufferLockOptionsDto, input, BUFFER_LOCK_DEFAULTS, messages);
  return {
    redis: dto.redis as RedisConnection,
    namespace: dto.namespace,
    ttl: parseSeconds(dto.ttl)!,
    messages: dto.messages,
    lockTimeout: parseSeconds(dto.lockTimeout)!,
    onBusy: dto.onBusy,
    locale: dto.locale,
    catalogs: dto.catalogs,
    logger: dto.logger ?? new Logger('BufferLock'),
    logInterval: parseSeconds(dto.logInterval)!,
    fencing: dto.fencing,
    share: dto.share,
    serializer: dto.serializer,
    onRedisError: dto.onRedisError,
    maxHold: dto.maxHold === undefined ? undefined : parseSeconds(dto.maxHold),
    onLockLost: dto.onLockLost,
    circuitBreaker:
      dto.circuitBreaker === false
        ? false
        : {
            failureThreshold:
              dto.circuitBreaker.failureThreshold ?? CIRCUIT_BREAKER_DEFAULTS.failureThreshold,
            openSeconds:
              parseSeconds(dto.circuitBreaker.openSeconds) ?? CIRCUIT_BREAKER_DEFAULTS.openSeconds,
            probes: dto.circuitBreaker.probes ?? CIRCUIT_BREAKER_DEFAULTS.probes,
          },
  };
}

/**
 * The message settings in raw module options, leaving out any that are themselves invalid so that
 * they are reported in words that still render.
 *
 * @example
 * ```ts
 * new BufferLockMessages(messageSettingsOf({ redis: client, locale: 'de', catalogs: { de } }));
 * ```
 */
export function messageSettingsOf(input: unknown): MessageSettings {
  const raw = (typeof input === 'object' && input !== null ? input : {}) as Partial<
    Record<keyof BufferLockOptions, unknown>
  >;
  return {
    locale: isNonEmptyString(raw.locale) ? (raw.locale as string) : undefined,
    catalogs: isCatalogs(raw.catalogs)
      ? (raw.catalogs as Record<string, MessageCatalog> | undefined)
      : undefined,
    messages: safeCatalog(raw),
  };
}

/**
 * The options of one `@SingleFlight` method. Each one left out takes the module's value.
 *
 * @example
 * ```ts
 * const options: SingleFlightOptions = { ttl: 120, lockTimeout: 30, onBusy: 'throw' };
 * ```
 */
export interface SingleFlightOptions {
  /** Seconds this method's lock lives in Redis. Default: the module's `ttl`. */
  ttl?: number;
  /** Seconds a busy caller waits with `onBusy: 'wait'`. Default: the module's `lockTimeout`. */
  lockTimeout?: number;
  /** What a call does when another worker holds the lock. Default: the module's `onBusy`. */
  onBusy?: OnBusy;
  /**
   * Share this method's result with the waiters of other processes (they do not run it). The result
   * must survive the serializer (JSON by default); `@Res()` handlers are refused. Default: the
   * module's `share`.
   */
  share?: boolean;
  /** What a call does when Redis cannot be asked. Default: the module's `onRedisError`. */
  onRedisError?: OnRedisError;
  /** Seconds this method may hold its lock in all (watchdog cap). Default: the module's `maxHold`. */
  maxHold?: number;
}

/**
 * The class-validator DTO for {@link SingleFlightOptions}; `lockTimeout < ttl` when both given.
 *
 * @example
 * ```ts
 * validateOptions(SingleFlightOptionsDto, { ttl: 30 }, {}, messages);
 * ```
 */
export class SingleFlightOptionsDto {
  @Rule('isPositiveSeconds', 'redis_ttl_invalid', optional((v) => parseSeconds(v) !== undefined))
  ttl?: number;

  @Rule('isPositiveSeconds', 'lock_timeout_invalid', optional((v) => parseSeconds(v) !== undefined))
  @Rule('isShorterThanTtl', 'lock_timeout_not_below_ttl', isShorterThanTtl)
  lockTimeout?: number;

  @Rule('isOnBusy', 'on_busy_invalid', optional((v) => ON_BUSY_MODES.includes(v as OnBusy)))
  onBusy?: OnBusy;

  @Rule('isBoolean', 'share_invalid', optional((v) => typeof v === 'boolean'))
  share?: boolean;

  @Rule(
    'isOnRedisError',
    'on_redis_error_invalid',
    optional((v) => ON_REDIS_ERROR_MODES.includes(v as OnRedisError)),
  )
  onRedisError?: OnRedisError;

  @Rule('isPositiveSeconds', 'max_hold_invalid', optional((v) => parseSeconds(v) !== undefined))
  maxHold?: number;
}

/**
 * Validates a `@SingleFlight` method's options when its class is defined and returns them with
 * seconds as numbers. Throws one `BufferLockConfigError` listing every violation.
 *
 * @example
 * ```ts
 * resolveSingleFlightOptions({ ttl: '30' }, new BufferLockMessages()); // { ttl: 30 }
 * ```
 */
export function resolveSingleFlightOptions(
  input: SingleFlightOptions,
  messages: BufferLockMessages,
): SingleFlightOptions {
  const dto = validateOptions(SingleFlightOptionsDto, input, {}, messages);
  const resolved: SingleFlightOptions = {};
  if (dto.ttl !== undefined) resolved.ttl = parseSeconds(dto.ttl);
  if (dto.lockTimeout !== undefined) resolved.lockTimeout = parseSeconds(dto.lockTimeout);
  if (dto.onBusy !== undefined) resolved.onBusy = dto.onBusy;
  if (dto.share !== undefined) resolved.share = dto.share;
  if (dto.onRedisError !== undefined) resolved.onRedisError = dto.onRedisError;
  if (dto.maxHold !== undefined) resolved.maxHold = parseSeconds(dto.maxHold);
  return resolved;
}
