import { ValidateIf } from 'class-validator';
import { Seconds } from './validate-options.js';

const given = (_options: object, value: unknown): boolean => value !== undefined;

/**
 * The declaration of the cache's per-call options (module option `cacheDefaults`, and the options
 * of `getOrSet`, `@Cached` and `@CacheTTL`-less interceptor routes): for each one its type, its
 * default and its rule.
 *
 * @example
 * ```ts
 * const own = validateOptions(CacheOptionsDto, { ttl: '30', grace: 300 }, messages, 'partial');
 * ```
 */
export class CacheOptionsDto {
  /** Seconds an entry is fresh: served from the store with no lock at all. Default `60`. */
  @Seconds('cache_ttl_invalid')
  ttl: number = 60;

  /**
   * Seconds after `ttl` during which a stale entry is still served while one worker in the whole
   * fleet refreshes it in the background. Default `0`: nothing stale is served.
   */
  @Seconds('cache_grace_invalid', { orZero: true })
  grace: number = 0;

  /** Seconds a caller holding a stale entry waits for its refresh before taking it. Default `0`. */
  @Seconds('cache_timeout_invalid', { orZero: true })
  timeout: number = 0;

  /** Seconds the build's lock lives in Redis (extended while the build runs). Default: the module's `ttl`. */
  @ValidateIf(given)
  @Seconds('cache_lock_ttl_invalid')
  lockTtl?: number = undefined;

  /** Seconds a missing entry's callers wait for its builder. Default: the module's `lockTimeout`. */
  @ValidateIf(given)
  @Seconds('cache_lock_timeout_invalid')
  lockTimeout?: number = undefined;
}

/**
 * The options of one cached call (`getOrSet`, `set`, `@Cached`). Each one left out takes the
 * module's `cacheDefaults`. Seconds may be decimal strings (`'30'`).
 *
 * @example
 * ```ts
 * const options: BufferCacheOptions = { ttl: 60, grace: 600, timeout: 0.2 };
 * ```
 */
export type BufferCacheOptions = Partial<CacheOptionsDto>;

/**
 * A cached call's options, complete.
 *
 * @example
 * ```ts
 * const settings: CacheSettings = callSettings.of({ ttl: 60, grace: 600 }); // the rest: defaults
 * ```
 */
export type CacheSettings = Readonly<Required<Omit<CacheOptionsDto, 'lockTtl' | 'lockTimeout'>>> & {
  readonly lockTtl: number;
  readonly lockTimeout: number;
};
