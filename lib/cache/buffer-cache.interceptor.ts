import {
  Inject,
  Injectable,
  Logger,
  Optional,
  StreamableFile,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { lastValueFrom, of, throwError, type Observable } from 'rxjs';
import { BufferCache, LOOKUP, type CacheLookup } from './buffer-cache.service.js';
import type { BufferCacheOptions } from '../options/cache.options.js';

// The metadata keys of `@CacheKey()` and `@CacheTTL()` from @nestjs/cache-manager, spelled out so
// that the package (an optional peer) is never loaded.
const CACHE_KEY_METADATA = 'cache_module:cache_key';
const CACHE_TTL_METADATA = 'cache_module:cache_ttl';

/** `@CacheTTL(0)` means "never expires" in cache-manager: here, one hundred years. */
const FOREVER_SECONDS = 100 * 365 * 24 * 3600;

type CacheKeyFactory = (context: ExecutionContext) => string | undefined | null;
type CacheTtlFactory = (context: ExecutionContext) => number | Promise<number>;

/**
 * What `X-Cache` says: the lookup's status, as CacheInterceptor spells its own.
 *
 * @example
 * ```ts
 * const status: CacheHeaderStatus = 'stale'; // sent as `X-Cache: STALE`
 * ```
 */
export type CacheHeaderStatus = CacheLookup<unknown>['status'];

const HEADERS: Readonly<Record<CacheHeaderStatus, string>> = {
  hit: 'HIT',
  miss: 'MISS',
  stale: 'STALE',
};

/** A handler's response that is sent but never cached (a `StreamableFile`, read only once). */
class Uncacheable {
  constructor(readonly value: unknown) {}
}

/** A non-object the handler threw, carried through the cache and thrown again as it was. */
class Thrown {
  constructor(readonly value: unknown) {}
}

const isObject = (value: unknown): value is object =>
  (typeof value === 'object' && value !== null) || typeof value === 'function';

/**
 * A drop-in replacement for `@nestjs/cache-manager`'s `CacheInterceptor` that builds a missing
 * entry once across the whole fleet: the same routes are cached (GET by default, keyed by
 * `@CacheKey()` or the request URL), `@CacheTTL()` is honoured (milliseconds, as in cache-manager;
 * a function of the `ExecutionContext` too) and the same bodies and status codes are sent. A cold
 * key under load runs its handler once in the fleet while the other requests wait for the entry;
 * with `grace` in the module's `cacheDefaults`, an expired entry is served at once while one worker
 * refreshes it. `X-Cache` is `HIT`, `MISS` or `STALE`. A handler's error is sent as it is and not
 * cached; a `StreamableFile` is sent and not cached; other methods pass through untouched.
 * Entries live in the module's cache store (`cache` option, default: the lock's Redis), with
 * `cacheDefaults.ttl` for routes without `@CacheTTL()`. Needs `BufferLockModule` visible to the
 * module that uses it; `@nestjs/cache-manager` is only needed for its decorators.
 *
 * @example
 * ```ts
 * @Controller('reports')
 * @UseInterceptors(BufferCacheInterceptor)
 * export class ReportsController {
 *   @Get('daily')
 *   @CacheKey('daily-report')
 *   @CacheTTL(30_000)
 *   daily(): Promise<Report> {
 *     return this.reports.buildDaily();
 *   }
 * }
 *
 * // or for every route of the app:
 * @Module({
 *   imports: [BufferLockModule.forRoot({ redis: process.env.REDIS_URL!, cacheDefaults: { ttl: 60 } })],
 *   providers: [{ provide: APP_INTERCEPTOR, useClass: BufferCacheInterceptor }],
 * })
 * export class AppModule {}
 * ```
 */
@Injectable()
export class BufferCacheInterceptor implements NestInterceptor {
  @Optional()
  @Inject(HttpAdapterHost)
  protected readonly httpAdapterHost?: HttpAdapterHost;

  /** The request methods that are cached. */
  protected allowedMethods: string[] = ['GET'];

  /** The errors the handlers threw: passed on as they are, unlike the cache's own. */
  private readonly handlerErrors = new WeakSet<object>();

  constructor(
    @Inject(BufferCache) protected readonly cache: BufferCache,
    @Inject(Reflector) protected readonly reflector: Reflector,
  ) {}

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const key = await this.trackBy(context);
    const ttlValueOrFactory =
      this.reflector.get<unknown>(CACHE_TTL_METADATA, context.getHandler()) ??
      this.reflector.get<unknown>(CACHE_TTL_METADATA, context.getClass()) ??
      null;
    if (!key) return next.handle();

    let uncacheable: Uncacheable | undefined;
    let produced: { value: unknown } | undefined;
    const factory = async (): Promise<unknown> => {
      let value: unknown;
      try {
        value = await lastValueFrom(next.handle());
      } catch (error) {
        if (!isObject(error)) throw new Thrown(error);
        this.handlerErrors.add(error);
        throw error;
      }
      if (value instanceof StreamableFile) throw (uncacheable = new Uncacheable(value));
      produced = { value };
      return value;
    };

    try {
      const ttl =
        typeof ttlValueOrFactory === 'function'
          ? await (ttlValueOrFactory as CacheTtlFactory)(context)
          : ttlValueOrFactory;
      const options = optionsOf(ttl);
      if (options === 'uncached') {
        // A negative TTL in cache-manager stores an entry that has already expired.
        this.setHeadersWhenHttp(context, 'miss');
        return next.handle();
      }
      const { value, status } = await this.cache[LOOKUP](String(key), factory, options);
      this.setHeadersWhenHttp(context, status);
      return of(value);
    } catch (error) {
      if (error instanceof Thrown || (isObject(error) && this.handlerErrors.has(error))) {
        this.setHeadersWhenHttp(context, 'miss');
        return throwError(() => (error instanceof Thrown ? error.value : error));
      }
      if (error instanceof Uncacheable) {
        this.setHeadersWhenHttp(context, 'miss');
        // The file went to the request that built it; any other request reads its own.
        return error === uncacheable ? of(error.value) : next.handle();
      }
      const text = error instanceof Error ? (error.stack ?? error.message) : String(error);
      Logger.error(`The cache failed for "key: ${String(key)}"`, text, 'BufferCacheInterceptor');
      if (!produced) return next.handle();
      this.setHeadersWhenHttp(context, 'miss');
      return of(produced.value);
    }
  }

  /**
   * The cache key of the request: `@CacheKey()` (a string, or a function of the context) when the
   * handler has one, else the request URL for a cacheable HTTP request, else none (not cached).
   * Outside an HTTP app only `@CacheKey()` routes are cached.
   */
  protected trackBy(
    context: ExecutionContext,
  ): Promise<string | undefined | null> | string | undefined | null {
    const httpAdapter = this.httpAdapterHost?.httpAdapter;
    const isHttpApp = !!httpAdapter && !!httpAdapter.getRequestMethod;
    const cacheMetadataOrFactory =
      this.reflector.get<string | CacheKeyFactory | undefined>(
        CACHE_KEY_METADATA,
        context.getHandler(),
      ) ?? undefined;
    if (!isHttpApp || cacheMetadataOrFactory) {
      return typeof cacheMetadataOrFactory === 'function'
        ? cacheMetadataOrFactory(context)
        : cacheMetadataOrFactory;
    }
    const request: unknown = context.getArgByIndex(0);
    if (!this.isRequestCacheable(context)) return undefined;
    return httpAdapter.getRequestUrl(request) as string;
  }

  /** Whether the request is cached: its method is one of `allowedMethods` (GET). */
  protected isRequestCacheable(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ method?: string } | undefined>();
    return this.allowedMethods.includes(request?.method as string);
  }

  /** Sets `X-Cache` on an HTTP response, through the app's HTTP adapter (Express, Fastify). */
  protected setHeadersWhenHttp(context: ExecutionContext, status: CacheHeaderStatus): void {
    const httpAdapter = this.httpAdapterHost?.httpAdapter;
    if (!httpAdapter || context.getType() !== 'http') return;
    const response: unknown = context.switchToHttp().getResponse();
    httpAdapter.setHeader(response, 'X-Cache', HEADERS[status]);
  }
}

/**
 * The options of a `@CacheTTL()` in milliseconds: none (the module's `cacheDefaults`) when there
 * is no TTL, `'uncached'` for a negative one. What is not a number is handed on to be refused.
 */
function optionsOf(ttl: unknown): BufferCacheOptions | undefined | 'uncached' {
  if (ttl === null || ttl === undefined) return undefined;
  if (typeof ttl !== 'number' || Number.isNaN(ttl)) return { ttl: ttl as number };
  if (ttl < 0) return 'uncached';
  if (ttl === 0 || ttl === Infinity) return { ttl: FOREVER_SECONDS };
  return { ttl: Math.max(1, Math.round(ttl)) / 1000 };
}
