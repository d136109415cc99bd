import { Logger, type LoggerService } from '@nestjs/common';
import { IsIn, ValidateIf } from 'class-validator';
import type { RedisOptions } from 'ioredis';
import { isMemoryUrl } from '../memory/memory-url.js';
import type { BufferLockMessages, MessageSettings } from '../messages/buffer-lock-messages.js';
import type { MessageCatalog } from '../messages/messages.catalog.js';
import type { ResultSerializer } from '../serialization/result-serializer.js';
import type { FlightLockLostEvent } from '../types/events.js';
import {
  CircuitBreakerOptionsDto,
  type CircuitBreakerSettings,
} from './circuit-breaker.options.js';
import { RedisLockOptionsDto, safeCatalog } from './redis-lock.options.js';
import { isScriptClient, type LockClient, type RedisClientFactory } from '../redis/client.js';
import { CacheOptionsDto } from './cache.options.js';
import {
  given,
  hasMethods,
  isCacheStore,
  isNonEmptyString,
  isPlainObject,
  isRedisUrl,
} from './rules.js';
import { parseSeconds } from './seconds.js';
import {
  isResolved,
  markResolved,
  Nested,
  readableCopy,
  Rule,
  Seconds,
  validateOptions,
} from './validate-options.js';

const ON_BUSY_MODES = ['wait', 'skip', 'throw'] as const;
const ON_REDIS_ERROR_MODES = ['proceed', 'throw'] as const;

/**
 * How the module reaches Redis: a client object (left alone at shutdown), a factory (called once
 * per process; its client is quit at shutdown), a `redis://` / `rediss://` URL or an ioredis
 * options object (the module makes the client on first use and quits it at shutdown), or a
 * `memory://` URL (no Redis: the in-memory backend, which coordinates this process only).
 *
 * @example
 * ```ts
 * const connection: RedisConnection = process.env.REDIS_URL ?? 'memory://';
 * ```
 */
export type RedisConnection = LockClient | RedisClientFactory | string | RedisOptions;

const isCatalog = (value: unknown): boolean =>
  value !== undefined && safeCatalog({ messages: value }) === value;

const isCatalogs = (value: unknown): boolean => {
  try {
    return value === undefined || (isPlainObject(value) && Object.values(value).every(isCatalog));
  } catch {
    // A getter or Proxy trap that throws: no catalogs.
    return false;
  }
};

/** Broken only when both `lockTimeout` and `ttl` are valid and out of order. */
const isShorterThanTtl = (value: unknown, options: Record<string, unknown>): boolean => {
  const lockTimeout = parseSeconds(value);
  const ttl = parseSeconds(options.ttl);
  return lockTimeout === undefined || ttl === undefined || lockTimeout < ttl;
};

/**
 * The declaration of the module's options: the lock's, plus the module's own. For each one its
 * type, its default (the initializer), its rule and the message id it is refused with.
 *
 * @example
 * ```ts
 * new BufferLockOptionsDto().lockTimeout; // 10
 * validateOptions(BufferLockOptionsDto, { ttl: '30', onBusy: 'skip' }, messages, 'partial');
 * // { ttl: 30, onBusy: 'skip' }
 * ```
 */
export class BufferLockOptionsDto extends RedisLockOptionsDto {
  /**
   * A client (ioredis, iovalkey, node-redis, or anything with `eval()`), a factory returning one
   * (called once per process), a `redis://` / `rediss://` URL or ioredis options (the module makes
   * that client with ioredis), or `'memory://'` for the in-memory backend (no Redis, this process
   * only). Required.
   */
  @Rule(
    'module_redis_invalid',
    (v) =>
      isScriptClient(v) ||
      typeof v === 'function' ||
      isRedisUrl(v) ||
      isMemoryUrl(v) ||
      isPlainObject(v),
  )
  override redis: unknown;

  /** Seconds a `@SingleFlight` caller waits for the holder. Below `ttl`. Default `10`. */
  @Seconds('lock_timeout_invalid')
  @Rule('lock_timeout_not_below_ttl', isShorterThanTtl)
  lockTimeout: number = 10;

  /**
   * What a `@SingleFlight` call does when another worker holds the lock: `'wait'` for it (up to
   * `lockTimeout`), `'skip'` the call (resolve `undefined`), or `'throw'` a `LockBusyError`
   * (409). Default `'wait'`.
   */
  @IsIn(ON_BUSY_MODES, { message: 'on_busy_invalid' })
  onBusy: (typeof ON_BUSY_MODES)[number] = 'wait';

  /** The catalog to render texts from, by its name in `catalogs`. Default `'en'`. */
  @Rule('locale_invalid', isNonEmptyString)
  locale: string = 'en';

  /** Extra catalogs by locale; ids a catalog leaves out fall back to English. */
  @Rule('catalogs_invalid', isCatalogs)
  catalogs?: Readonly<Record<string, MessageCatalog>> = undefined;

  /** Where log lines go. Default `new Logger('BufferLock')`. */
  @ValidateIf(given)
  @Rule('logger_invalid', hasMethods('log', 'warn', 'error'))
  logger: LoggerService = new Logger('BufferLock');

  /** Seconds between two log lines with the same message id; the rest are counted. Default 10. */
  @Seconds('log_interval_invalid')
  logInterval: number = 10;

  /**
   * Share the leader's result with the waiters of other processes, so they do not run the method.
   * The result must survive the serializer; `@Res()` handlers are refused. Default `false`.
   */
  @Rule('share_invalid', (v) => typeof v === 'boolean')
  share: boolean = false;

  /** How results are shared (`share: true`). Default JSON. */
  @ValidateIf(given)
  @Rule('serializer_invalid', hasMethods('serialize', 'deserialize'))
  serializer?: ResultSerializer = undefined;

  /**
   * What a call does when Redis cannot be asked (error, timeout, open breaker): `'proceed'` runs
   * the method without a cross-worker lock (logged, rate limited), `'throw'` rejects with a
   * `RedisUnavailableError` (503). Default `'proceed'`.
   */
  @IsIn(ON_REDIS_ERROR_MODES, { message: 'on_redis_error_invalid' })
  onRedisError: (typeof ON_REDIS_ERROR_MODES)[number] = 'proceed';

  /**
   * Seconds a `@SingleFlight` method may hold its lock in all: the watchdog extends the lock every
   * ttl/3 while the method runs, up to this cap. Default: no cap.
   */
  @ValidateIf(given)
  @Seconds('max_hold_invalid')
  maxHold?: number = undefined;

  /** Called when a running method's lock was lost (besides the engine's `'lockLost'` event). */
  @ValidateIf(given)
  @Rule('on_lock_lost_invalid', (v) => typeof v === 'function')
  onLockLost?: (event: FlightLockLostEvent) => void = undefined;

  /**
   * The circuit breaker in front of Redis: after `failureThreshold` failures in a row, calls skip
   * Redis for `openSeconds`, then `probes` calls try it again. `false`: none.
   */
  @ValidateIf((_options, value) => value !== false)
  @Nested(CircuitBreakerOptionsDto, 'circuit_breaker_invalid')
  circuitBreaker: CircuitBreakerSettings = new CircuitBreakerOptionsDto();

  /**
   * Where `BufferCache`, `@Cached` and `BufferCacheInterceptor` keep entries: a cache-manager
   * `Cache` (what `@nestjs/cache-manager` injects as `CACHE_MANAGER`), a Keyv instance, or any
   * `BufferCacheStore`. Default: a store on the lock's own Redis, under `cachePrefix`.
   */
  @ValidateIf(given)
  @Rule('cache_store_invalid', isCacheStore)
  cache?: object = undefined;

  /** The prefix of the entries of the built-in Redis store. Default `'buffer:cache:'`. */
  @Rule('cache_prefix_invalid', (v) => isNonEmptyString(v) && !/[{}]/.test(v))
  cachePrefix: string = 'buffer:cache:';

  /** The cache's per-call defaults (fields left out take theirs): `ttl` 60, `grace` 0, `timeout` 0. */
  @Nested(CacheOptionsDto, 'cache_defaults_invalid')
  cacheDefaults: CacheOptionsDto = new CacheOptionsDto();

  /**
   * Put the raw cache key in what the diagnostics channels publish (and so in spans), besides
   * its hash. Keys may hold user data: default `false`, the hash only.
   */
  @Rule('trace_keys_invalid', (v) => typeof v === 'boolean')
  traceKeys: boolean = false;
}

type ModuleFields = Omit<BufferLockOptionsDto, 'redis' | 'circuitBreaker' | 'cacheDefaults'>;

/**
 * The options of `BufferLockModule`: the lock's options plus the single-flight and message
 * settings. Seconds may also be given as decimal strings (`'30'`), as environment config delivers
 * them; anything else that is not a positive decimal number is refused.
 *
 * @example
 * ```ts
 * const options: BufferLockOptions = {
 *   redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
 *   namespace: 'shop:buffer:',
 *   ttl: 30,
 *   lockTimeout: 10,
 * };
 * ```
 */
export type BufferLockOptions = Partial<ModuleFields> & {
  /**
   * A client (ioredis, iovalkey, node-redis, or anything with `eval()`), a factory returning one
   * (called once per process), a `redis://` / `rediss://` URL or ioredis options (the module makes
   * that client with ioredis), or `'memory://'` for the in-memory backend (no Redis, this process
   * only). Required.
   */
  redis: RedisConnection;
  /**
   * The circuit breaker in front of Redis (fields left out take their defaults: 5 failures, 10 s
   * open, 1 probe), or `false` for none.
   */
  circuitBreaker?: Partial<CircuitBreakerOptionsDto> | false;
  /** The cache's per-call defaults: `ttl` 60, `grace` 0, `timeout` 0, `lockTtl`, `lockTimeout`. */
  cacheDefaults?: Partial<CacheOptionsDto>;
};

/**
 * The validated module options, with defaults filled in, seconds as numbers, and `redis` turned
 * into a client or a factory: what `@InjectBufferLockOptions()` injects.
 *
 * @example
 * ```ts
 * constructor(@InjectBufferLockOptions() options: ResolvedBufferLockOptions) {
 *   console.log(options.lockTimeout); // 10
 * }
 * ```
 */
export type ResolvedBufferLockOptions = Readonly<
  ModuleFields & {
    redis: LockClient | RedisClientFactory;
    circuitBreaker: CircuitBreakerSettings;
    cacheDefaults: Readonly<CacheOptionsDto>;
  }
>;

/**
 * Validates module options and fills in the defaults. Throws one `BufferLockConfigError` listing
 * every violation in `messages`' words. `redis` is returned as given (a URL stays a URL); the
 * module turns it into a factory.
 *
 * @example
 * ```ts
 * const options = resolveBufferLockOptions({ redis: 'memory://', ttl: 30 }, messages);
 * options.lockTimeout; // 10
 * options.redis; // 'memory://'
 * ```
 */
export function resolveBufferLockOptions(
  input: BufferLockOptions,
  messages: BufferLockMessages,
): Omit<ResolvedBufferLockOptions, 'redis'> & { readonly redis: RedisConnection } {
  return validateOptions(BufferLockOptionsDto, input, messages) as Omit<
    ResolvedBufferLockOptions,
    'redis'
  > & { readonly redis: RedisConnection };
}

/**
 * What the single-flight engine runs with: resolved module options less the lock's own (the
 * lock has them), `ttl` aside, which is the default of every call.
 *
 * @example
 * ```ts
 * const options: FlightOptions = resolveFlightOptions({ onBusy: 'skip' }, lock.ttl, messages);
 * ```
 */
export type FlightOptions = Omit<ResolvedBufferLockOptions, 'redis' | 'namespace' | 'fencing'>;

/**
 * Options for an engine made without the module: those given are validated, the rest take their
 * defaults, and `ttl` defaults to the lock's. Resolved options are taken as they are.
 *
 * @example
 * ```ts
 * const options = resolveFlightOptions({ onBusy: 'skip' }, 30, messages);
 * options.ttl; // 30: the lock's
 * options.lockTimeout; // 10: the default
 * ```
 */
export function resolveFlightOptions(
  input: Partial<Omit<BufferLockOptions, 'redis'>> | FlightOptions = {},
  lockTtl: number,
  messages: BufferLockMessages,
): FlightOptions {
  if (isResolved(input)) return input as FlightOptions;
  const own = validateOptions(BufferLockOptionsDto, input, messages, 'partial');
  const options = new BufferLockOptionsDto() as unknown as Record<string, unknown>;
  options.ttl = lockTtl;
  for (const [key, value] of Object.entries(own)) if (value !== undefined) options[key] = value;
  return markResolved(options) as FlightOptions;
}

/**
 * The message settings in raw module options, leaving out any that are themselves invalid so that
 * they are reported in words that still render.
 *
 * @example
 * ```ts
 * const messages = new BufferLockMessages(messageSettingsOf(rawOptions));
 * messageSettingsOf({ locale: 'de', messages: { no_such_id: 'x' } });
 * // { locale: 'de', catalogs: undefined, messages: undefined }: invalid overrides left out
 * ```
 */
export function messageSettingsOf(input: unknown): MessageSettings {
  const raw = readableCopy(input);
  return {
    locale: isNonEmptyString(raw.locale) ? (raw.locale as string) : undefined,
    catalogs: isCatalogs(raw.catalogs)
      ? (raw.catalogs as Record<string, MessageCatalog> | undefined)
      : undefined,
    messages: safeCatalog(raw),
  };
}
