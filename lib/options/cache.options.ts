import type { SecondsOption } from './seconds.js';
import { ValidateIf } from 'class-validator';
import { given } from './rules.js';
import { Rule, Seconds } from './validate-options.js';

/**
 * The options of one cached call (`getOrSet`, `set`, `@Cached`); each one left out takes the
 * module's `cacheDefaults`.
 *
 * @example
 * ```ts
 * const options: BufferCacheOptions = { ttl: 60, grace: 600, timeout: 0.2 };
 * ```
 */
export interface BufferCacheOptions {
  /** Seconds an entry is fresh: served from the store with no lock. Default `60`. */
  ttl?: SecondsOption;
  /** Seconds past `ttl` a stale entry is served while one worker refreshes it. Default `0`. */
  grace?: SecondsOption;
  /**
   * Seconds past `ttl + grace` an entry is still kept, and served when its rebuild fails (throws,
   * or passes `hardTimeout`): the caller gets it instead of the error. At most 604800 (7 days).
   * Default `0`.
   */
  staleIfError?: SecondsOption;
  /** Seconds a caller holding a stale entry waits for its refresh. Default `0`. */
  timeout?: SecondsOption;
  /** Seconds the build's lock lives (extended while it runs). Default: the module's `ttl`. */
  lockTtl?: SecondsOption;
  /** Seconds a missing entry's callers wait for its builder. Default: the module's `lockTimeout`. */
  lockTimeout?: SecondsOption;
  /** Seconds a build may take: then its callers get `cache_build_timeout`. Default `60`. */
  hardTimeout?: SecondsOption;
  /** The most bytes a value may take once serialized; a larger one is refused. Default 4 MiB. */
  maxValueBytes?: number;
  /** Refreshes a hot entry before it expires (XFetch); `true` is β = 1, a number β. Default `false`. */
  earlyRefresh?: boolean | number;
  /** `false`: this call's entry is neither read from nor kept in the module's `l1`. Default `true`. */
  l1?: boolean;
  /** Tags of the entry: `BufferCache.deleteByTag` makes every entry with one of them a miss. */
  tags?: readonly string[];
}

/** Tags: an array of non-empty strings. */
export const isTags = (v: unknown): boolean =>
  Array.isArray(v) && v.every((tag) => typeof tag === 'string' && tag !== '');

/** The longest `staleIfError`: 7 days, as long as a tagged entry is kept. */
const MAX_STALE_IF_ERROR = 7 * 24 * 3600;

// The rules and defaults of `BufferCacheOptions`: module option `cacheDefaults`, and each call's.
export class CacheOptionsDto implements BufferCacheOptions {
  @Seconds('cache_ttl_invalid')
  ttl: number = 60;

  @Seconds('cache_grace_invalid', { orZero: true })
  grace: number = 0;

  @Seconds('cache_timeout_invalid', { orZero: true, timed: true })
  timeout: number = 0;

  @Seconds('cache_stale_if_error_invalid', { orZero: true, max: MAX_STALE_IF_ERROR })
  staleIfError: number = 0;

  @ValidateIf(given)
  @Seconds('cache_lock_ttl_invalid', { timed: true })
  lockTtl?: number = undefined;

  @ValidateIf(given)
  @Seconds('cache_lock_timeout_invalid', { timed: true })
  lockTimeout?: number = undefined;

  @Seconds('cache_hard_timeout_invalid', { timed: true })
  hardTimeout: number = 60;

  @Rule('cache_max_value_bytes_invalid', (v) => Number.isSafeInteger(v) && (v as number) > 0)
  maxValueBytes: number = 4 * 1024 * 1024;

  @Rule(
    'cache_early_refresh_invalid',
    (v) => typeof v === 'boolean' || (typeof v === 'number' && v > 0 && v < Infinity),
  )
  earlyRefresh: boolean | number = false;

  @Rule('cache_l1_invalid', (v) => typeof v === 'boolean')
  l1: boolean = true;

  @Rule('cache_tags_invalid', isTags)
  tags: readonly string[] = [];
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/i;

// The rules and defaults of the module option `http` (and `BufferCacheInterceptor.with()`).
export class HttpCacheOptionsDto {
  @Rule('http_authorized_invalid', (v) => typeof v === 'boolean')
  shareAuthorized: boolean = false;

  @Rule(
    'http_vary_invalid',
    (v) =>
      Array.isArray(v) && v.every((name) => typeof name === 'string' && HEADER_NAME.test(name)),
  )
  vary: readonly string[] = [];

  @Seconds('http_max_ttl_invalid')
  maxTtl: number = 86_400;

  @Rule('http_freshness_invalid', (v) => typeof v === 'boolean')
  requireFreshness: boolean = false;
}

export type CacheSettings = Readonly<Required<Omit<CacheOptionsDto, 'lockTtl' | 'lockTimeout'>>> & {
  readonly lockTtl: number;
  readonly lockTimeout: number;
};
