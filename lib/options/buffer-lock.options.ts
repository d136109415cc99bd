import type { SecondsOption, SecondsResolved } from './seconds.js';
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
import { L1OptionsDto, type L1Settings } from './l1.options.js';
import { WriteReplicasOptionsDto, type WriteReplicasSettings } from './write-replicas.options.js';
import {
  CircuitBreakerOptionsDto,
  type CircuitBreakerSettings,
} from './circuit-breaker.options.js';
import { safeCatalog, type RedisLockOptions } from './redis-lock.options.js';
import { attempt } from '../messages/error-text.js';
import {
  given,
  hasMethods,
  isCacheStore,
  isNonEmptyString,
  isPlainObject,
  isRedisUrl,
} from './rules.js';
import { SingleFlightOptionsDto, type SingleFlightOptions } from './single-flight.options.js';
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

/**
 * The options of `BufferLockModule`: the lock's, a flight's defaults, then the module's own;
 * seconds are numbers. `redis`: a client (ioredis, iovalkey, node-redis, or anything with
 * `eval()`), a factory returning one, a `redis://` URL or ioredis options (the module makes and
 * quits that client), or `'memory://'`.
 *
 * @example
 * ```ts
 * const options: BufferLockOptions = { redis: process.env.REDIS_URL ?? 'memory://', ttl: 30 };
 * ```
 */
export interface BufferLockOptions extends Omit<RedisLockOptions, 'redis'>, SingleFlightOptions {
  redis: LockClient | RedisClientFactory | string | RedisOptions;
  /** The catalog to render texts from, by its name in `catalogs`. Default `'en'`. */
  locale?: string;
  /** Extra catalogs by locale; ids a catalog leaves out fall back to English. */
  catalogs?: Readonly<Record<string, Partial<Record<MessageId, string>>>>;
  /** Where log lines go. Default `new Logger('BufferLock')`. */
  logger?: LoggerService;
  /** Seconds between two log lines with the same message id; the rest are counted. Default 10. */
  logInterval?: number;
  /** How results are shared (`share: true`) and cached. Default JSON. */
  serializer?: ResultSerializer;
  /** Called when a running method's lock was lost (besides the engine's `'lockLost'` event). */
  onLockLost?: (event: FlightLockLostEvent) => void;
  /** Skip Redis for a while after it failed; `false`: never. */
  circuitBreaker?:
    | {
        /** Consecutive Redis failures that open the breaker. Default `5`. */
        failureThreshold?: number;
        /** Seconds calls skip Redis once open, before a probe is let through. Default `10`. */
        openSeconds?: SecondsOption;
        /** Calls let through at once while half-open. Default `1`. */
        probes?: number;
      }
    | false;
  /** A cache-manager `Cache`, a Keyv or any `BufferCacheStore`. Default: the lock's Redis. */
  cache?: object;
  /**
   * Seconds a call to a store of your own (`cache`) may take: past them a read is a miss and a
   * write fails (a late `set` is deleted again). Default 2.
   */
  storeTimeout?: SecondsOption;
  /** The prefix of every cache entry's key, in any store (`''` for none). Default `'buffer:cache:'`. */
  cachePrefix?: string;
  /** The cache's per-call defaults. */
  cacheDefaults?: BufferCacheOptions;
  /**
   * An in-process tier in front of the store: a hit there sends nothing to Redis. Every write or
   * delete of an entry, in any worker, drops the copies of the others. Default `false` (none).
   */
  l1?:
    | {
        /** Entries kept at most; the least recently used one goes first. Default `10000`. */
        maxEntries?: number;
        /** Seconds a copy is served at most, whatever happens to invalidations. Default `5`. */
        maxAge?: SecondsOption;
      }
    | false;
  /**
   * Replicas that must have each `set`, `delete`, `deleteByTag`, `@CachePut` and `@CacheEvict`
   * before it returns (Redis `WAIT`, on a connection of its own), so that a fail-over to a replica
   * keeps it. A write they do not confirm within `timeout` rejects, as a failed one does. Default
   * `false` (a write returns once the master has it).
   */
  writeReplicas?:
    | {
        /** Replicas that must confirm. Default `1`. */
        replicas?: number;
        /** Seconds to wait for them. Default `0.5`. */
        timeout?: SecondsOption;
      }
    | false;
  /** Which HTTP requests `BufferCacheInterceptor` shares, and what its URL keys vary by. */
  http?: {
    /** Also cache and coalesce requests with `Authorization` or `Cookie`. Default `false`. */
    shareAuthorized?: boolean;
    /** Request headers whose values are part of a URL key (`accept-language`). Default none. */
    vary?: readonly string[];
    /**
     * The most seconds a response's own `s-maxage`, `max-age`, `Expires` or
     * `stale-while-revalidate` keeps its entry. Default `86400` (a day).
     */
    maxTtl?: SecondsOption;
    /** A response with no `s-maxage`, `max-age` or `Expires` is not stored. Default `false`. */
    requireFreshness?: boolean;
  };
  /** Put the raw cache key in traces besides its hash; keys may hold user data. Default `false`. */
  traceKeys?: boolean;
}

// The module's rules and defaults: the lock's and a flight's (its base classes), then its own.
export class BufferLockOptionsDto
  extends SingleFlightOptionsDto
  implements Omit<BufferLockOptions, 'redis'>
{
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

  @Rule('locale_invalid', isNonEmptyString)
  locale: string = 'en';

  @Rule('catalogs_invalid', isCatalogs)
  catalogs?: Readonly<Record<string, Partial<Record<MessageId, string>>>> = undefined;

  @ValidateIf(given)
  @Rule('logger_invalid', hasMethods('log', 'warn', 'error'))
  logger: LoggerService = new Logger('BufferLock');

  @Seconds('log_interval_invalid')
  logInterval: number = 10;

  @ValidateIf(given)
  @Rule('serializer_invalid', hasMethods('serialize', 'deserialize'))
  serializer?: ResultSerializer = undefined;

  @ValidateIf(given)
  @Rule('on_lock_lost_invalid', (v) => typeof v === 'function')
  onLockLost?: (event: FlightLockLostEvent) => void = undefined;

  @ValidateIf((_options, value) => value !== false)
  @Nested(CircuitBreakerOptionsDto, 'circuit_breaker_invalid')
  circuitBreaker: CircuitBreakerSettings = new CircuitBreakerOptionsDto();

  @ValidateIf(given)
  @Rule('cache_store_invalid', isCacheStore)
  cache?: object = undefined;

  @Rule('cache_prefix_invalid', (v) => typeof v === 'string' && !/[{}]/.test(v))
  cachePrefix: string = 'buffer:cache:';

  @Seconds('store_timeout_invalid', { timed: true })
  storeTimeout: number = 2;

  @Nested(CacheOptionsDto, 'cache_defaults_invalid')
  cacheDefaults: CacheOptionsDto = new CacheOptionsDto();

  @ValidateIf((_options, value) => value !== false)
  @Nested(L1OptionsDto, 'l1_invalid')
  l1: L1Settings = false;

  @ValidateIf((_options, value) => value !== false)
  @Nested(WriteReplicasOptionsDto, 'write_replicas_invalid')
  writeReplicas: WriteReplicasSettings = false;

  @Nested(HttpCacheOptionsDto, 'http_invalid')
  http: HttpCacheOptionsDto = new HttpCacheOptionsDto();

  @Rule('trace_keys_invalid', (v) => typeof v === 'boolean')
  traceKeys: boolean = false;
}

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
  SecondsResolved<
    Required<
      Omit<
        BufferLockOptions,
        | 'catalogs'
        | 'messages'
        | 'serializer'
        | 'onLockLost'
        | 'cache'
        | 'maxHold'
        | 'redis'
        | 'circuitBreaker'
        | 'cacheDefaults'
        | 'l1'
        | 'writeReplicas'
        | 'http'
      >
    >
  > &
    // Those with no default stay optional.
    SecondsResolved<
      Pick<
        BufferLockOptions,
        'catalogs' | 'messages' | 'serializer' | 'onLockLost' | 'cache' | 'maxHold'
      >
    > & {
      redis: LockClient | RedisClientFactory;
      circuitBreaker:
        | Readonly<
            SecondsResolved<
              Required<Exclude<BufferLockOptions['circuitBreaker'], undefined | false>>
            >
          >
        | false;
      cacheDefaults: Readonly<
        SecondsResolved<Required<Omit<BufferCacheOptions, 'lockTtl' | 'lockTimeout'>>> &
          SecondsResolved<Pick<BufferCacheOptions, 'lockTtl' | 'lockTimeout'>>
      >;
      l1:
        | Readonly<SecondsResolved<Required<Exclude<BufferLockOptions['l1'], undefined | false>>>>
        | false;
      writeReplicas:
        | Readonly<
            SecondsResolved<
              Required<Exclude<BufferLockOptions['writeReplicas'], undefined | false>>
            >
          >
        | false;
      http: Readonly<SecondsResolved<Required<NonNullable<BufferLockOptions['http']>>>>;
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
