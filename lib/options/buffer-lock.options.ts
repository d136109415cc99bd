import { Logger, type LoggerService } from '@nestjs/common';
import { ValidateIf } from 'class-validator';
import type { RedisOptions } from 'ioredis';
import { isMemoryUrl } from '../memory/memory-url.js';
import type { BufferLockMessages, MessageSettings } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import type { ResultSerializer } from '../serialization/result-serializer.js';
import type { FlightLockLostEvent } from '../types/events.js';
import { isScriptClient, type LockClient, type RedisClientFactory } from '../redis/client.js';
import { CacheOptionsDto, HttpCacheOptionsDto, type BufferCacheOptions } from './cache.options.js';
import {
  CircuitBreakerOptionsDto,
  type CircuitBreakerSettings,
} from './circuit-breaker.options.js';
import { safeCatalog } from './redis-lock.options.js';
import { attempt } from '../messages/error-text.js';
import {
  given,
  hasMethods,
  isCacheStore,
  isNonEmptyString,
  isPlainObject,
  isRedisUrl,
} from './rules.js';
import { SingleFlightOptionsDto } from './single-flight.options.js';
import {
  isResolved,
  markResolved,
  Nested,
  readableCopy,
  Rule,
  Seconds,
  validateOptions,
} from './validate-options.js';

const isCatalog = (value: unknown): boolean =>
  value !== undefined && safeCatalog({ messages: value }) === value;

const isCatalogs = (value: unknown): boolean =>
  value === undefined ||
  (isPlainObject(value) && attempt(() => Object.values(value).every(isCatalog), false));

/** The module's options: the lock's and a flight's (its base classes), then the module's own. */
export class BufferLockOptionsDto extends SingleFlightOptionsDto {
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

  /** The catalog to render texts from, by its name in `catalogs`. Default `'en'`. */
  @Rule('locale_invalid', isNonEmptyString)
  locale: string = 'en';

  /** Extra catalogs by locale; ids a catalog leaves out fall back to English. */
  @Rule('catalogs_invalid', isCatalogs)
  catalogs?: Readonly<Record<string, Partial<Record<MessageId, string>>>> = undefined;

  /** Where log lines go. Default `new Logger('BufferLock')`. */
  @ValidateIf(given)
  @Rule('logger_invalid', hasMethods('log', 'warn', 'error'))
  logger: LoggerService = new Logger('BufferLock');

  /** Seconds between two log lines with the same message id; the rest are counted. Default 10. */
  @Seconds('log_interval_invalid')
  logInterval: number = 10;

  /** How results are shared (`share: true`) and cached. Default JSON. */
  @ValidateIf(given)
  @Rule('serializer_invalid', hasMethods('serialize', 'deserialize'))
  serializer?: ResultSerializer = undefined;

  /** Called when a running method's lock was lost (besides the engine's `'lockLost'` event). */
  @ValidateIf(given)
  @Rule('on_lock_lost_invalid', (v) => typeof v === 'function')
  onLockLost?: (event: FlightLockLostEvent) => void = undefined;

  /** After `failureThreshold` (5) Redis failures, skip Redis `openSeconds` (10). `false`: none. */
  @ValidateIf((_options, value) => value !== false)
  @Nested(CircuitBreakerOptionsDto, 'circuit_breaker_invalid')
  circuitBreaker: CircuitBreakerSettings = new CircuitBreakerOptionsDto();

  /** A cache-manager `Cache`, a Keyv or any `BufferCacheStore`. Default: the lock's Redis. */
  @ValidateIf(given)
  @Rule('cache_store_invalid', isCacheStore)
  cache?: object = undefined;

  /** The prefix of every cache entry's key, in any store (`''` for none). Default `'buffer:cache:'`. */
  @Rule('cache_prefix_invalid', (v) => typeof v === 'string' && !/[{}]/.test(v))
  cachePrefix: string = 'buffer:cache:';

  /** The cache's per-call defaults: `ttl` 60, `grace` 0, `timeout` 0, `lockTtl`, `lockTimeout`. */
  @Nested(CacheOptionsDto, 'cache_defaults_invalid')
  cacheDefaults: CacheOptionsDto = new CacheOptionsDto();

  /** Which HTTP requests `BufferCacheInterceptor` shares, and the headers its URL keys vary by. */
  @Nested(HttpCacheOptionsDto, 'http_invalid')
  http: HttpCacheOptionsDto = new HttpCacheOptionsDto();

  /** Put the raw cache key in traces besides its hash; keys may hold user data. Default `false`. */
  @Rule('trace_keys_invalid', (v) => typeof v === 'boolean')
  traceKeys: boolean = false;
}

type ModuleFields = Omit<
  BufferLockOptionsDto,
  'redis' | 'circuitBreaker' | 'cacheDefaults' | 'http'
>;

/**
 * The options of `BufferLockModule`; seconds are numbers. `redis`: a
 * client (ioredis, iovalkey, node-redis, or anything with `eval()`), a factory returning one, a
 * `redis://` URL or ioredis options (the module makes and quits that client), or `'memory://'`.
 *
 * @example
 * ```ts
 * const options: BufferLockOptions = { redis: process.env.REDIS_URL ?? 'memory://', ttl: 30 };
 * ```
 */
export type BufferLockOptions = Partial<ModuleFields> & {
  redis: LockClient | RedisClientFactory | string | RedisOptions;
  circuitBreaker?: Partial<CircuitBreakerOptionsDto> | false;
  cacheDefaults?: BufferCacheOptions;
  http?: Partial<HttpCacheOptionsDto>;
};

export type RedisConnection = BufferLockOptions['redis'];

/**
 * The validated module options, defaults filled in, seconds as numbers, `redis` a client or a
 * factory: what `@InjectBufferLockOptions()` injects.
 *
 * @example
 * ```ts
 * constructor(@InjectBufferLockOptions() options: ResolvedBufferLockOptions) {}
 * ```
 */
export type ResolvedBufferLockOptions = Readonly<
  ModuleFields & {
    redis: LockClient | RedisClientFactory;
    circuitBreaker: CircuitBreakerSettings;
    cacheDefaults: Readonly<CacheOptionsDto>;
    http: Readonly<HttpCacheOptionsDto>;
  }
>;

type ValidatedOptions = Omit<ResolvedBufferLockOptions, 'redis'> & {
  readonly redis: RedisConnection;
};

/** Validates module options and fills in the defaults; `redis` stays as given. */
export function resolveBufferLockOptions(
  input: BufferLockOptions,
  messages: BufferLockMessages,
): ValidatedOptions {
  return validateOptions(BufferLockOptionsDto, input, messages) as ValidatedOptions;
}

/** What the engine and the cache run with: the module's options less the lock's own. */
export type FlightOptions = Omit<ResolvedBufferLockOptions, 'redis' | 'namespace' | 'fencing'>;

/** Options of an engine made without the module; `ttl` defaults to the lock's. */
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

/** The message settings in raw options, leaving out invalid ones so that errors still render. */
export function messageSettingsOf(input: unknown): MessageSettings {
  const raw = readableCopy(input);
  return {
    locale: isNonEmptyString(raw.locale) ? raw.locale : undefined,
    catalogs: isCatalogs(raw.catalogs)
      ? (raw.catalogs as Record<string, Partial<Record<MessageId, string>>> | undefined)
      : undefined,
    messages: safeCatalog(raw),
  };
}
