import { ValidateIf } from 'class-validator';
import { given } from './rules.js';
import { Rule, Seconds } from './validate-options.js';

/** The cache's per-call options: module option `cacheDefaults`, and each cached call's own. */
export class CacheOptionsDto {
  /** Seconds an entry is fresh: served from the store with no lock. Default `60`. */
  @Seconds('cache_ttl_invalid')
  ttl: number = 60;

  /** Seconds past `ttl` a stale entry is served while one worker refreshes it. Default `0`. */
  @Seconds('cache_grace_invalid', { orZero: true })
  grace: number = 0;

  /** Seconds a caller holding a stale entry waits for its refresh. Default `0`. */
  @Seconds('cache_timeout_invalid', { orZero: true, timed: true })
  timeout: number = 0;

  /** Seconds the build's lock lives (extended while it runs). Default: the module's `ttl`. */
  @ValidateIf(given)
  @Seconds('cache_lock_ttl_invalid', { timed: true })
  lockTtl?: number = undefined;

  /** Seconds a missing entry's callers wait for its builder. Default: the module's `lockTimeout`. */
  @ValidateIf(given)
  @Seconds('cache_lock_timeout_invalid', { timed: true })
  lockTimeout?: number = undefined;

  /** Seconds a build may take: then its callers get `cache_build_timeout`. Default `60`. */
  @Seconds('cache_hard_timeout_invalid', { timed: true })
  hardTimeout: number = 60;

  /** The most bytes a value may take once serialized; a larger one is refused. Default 4 MiB. */
  @Rule('cache_max_value_bytes_invalid', (v) => Number.isSafeInteger(v) && (v as number) > 0)
  maxValueBytes: number = 4 * 1024 * 1024;
}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-z-]+$/i;

/** How `BufferCacheInterceptor` keys and shares HTTP requests: module option `http`, `with()`. */
export class HttpCacheOptionsDto {
  /** Also cache and coalesce requests with `Authorization` or `Cookie`. Default `false`. */
  @Rule('http_authorized_invalid', (v) => typeof v === 'boolean')
  shareAuthorized: boolean = false;

  /** Request headers whose values are part of a URL key (`accept-language`). Default none. */
  @Rule(
    'http_vary_invalid',
    (v) =>
      Array.isArray(v) && v.every((name) => typeof name === 'string' && HEADER_NAME.test(name)),
  )
  vary: readonly string[] = [];
}

/**
 * The options of one cached call (`getOrSet`, `set`, `@Cached`); each one left out takes the
 * module's `cacheDefaults`.
 *
 * @example
 * ```ts
 * const options: BufferCacheOptions = { ttl: 60, grace: 600, timeout: 0.2 };
 * ```
 */
export type BufferCacheOptions = Partial<CacheOptionsDto>;

export type CacheSettings = Readonly<Required<Omit<CacheOptionsDto, 'lockTtl' | 'lockTimeout'>>> & {
  readonly lockTtl: number;
  readonly lockTimeout: number;
};
