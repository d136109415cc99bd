import {
  Inject,
  Injectable,
  Logger,
  mixin,
  Optional,
  StreamableFile,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
  type Type,
} from '@nestjs/common';
import { SSE_METADATA } from '@nestjs/common/constants.js';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { of, throwError, type Observable } from 'rxjs';
import { BufferCache, HTTP, LOOKUP } from './buffer-cache.service.js';
import { beforeOf, replay, storedOf, type Head, type StoredResponse } from './http-entry.js';
import { headerReader, type HeaderReader } from './http-response.js';
import { answers, variantOf } from './http-vary.js';
import { notModified } from './http-conditional.js';
import { cachedMethod, hostOf, optionsOf, over, type RequestHeaders } from './http-request.js';
import { invalidating, UNSAFE_METHODS, urlEntry, urlKey, variedOf } from './http-invalidation.js';
import { Streamed } from './http-stream.js';
import { Carried, handlerOutcome, isHandlerOutcome, streaming } from './handler-outcome.js';
import { keyedValue } from './keyed-value.js';
import { fieldOf } from './graphql-field.js';
import { isEventHandler, messageKeyOf, patternOf } from './rpc-message.js';
import { BufferLockConfigError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { BufferLockOptions } from '../options/buffer-lock.options.js';
import { HttpCacheOptionsDto, type BufferCacheOptions } from '../options/cache.options.js';
import { configViolation } from '../options/config-violation.js';
import { isPlainObject } from '../options/rules.js';
import { shownValue } from '../options/shown-value.js';
import { validateOptions } from '../options/validate-options.js';

// `@CacheKey()`'s and `@CacheTTL()`'s metadata keys: @nestjs/cache-manager (an optional peer) is
// never loaded.
const CACHE_KEY_METADATA = 'cache_module:cache_key';
const CACHE_TTL_METADATA = 'cache_module:cache_ttl';

/** `@CacheTags()`'s metadata key: the tags of a route's entry, or a function of its context. */
export const CACHE_TAGS_METADATA = 'nestjs-buffer-lock:cache_tags';

type Factory<T> = (context: ExecutionContext) => T;
type HttpSettings = Readonly<HttpCacheOptionsDto>;

/**
 * A drop-in for `@nestjs/cache-manager`'s `CacheInterceptor` (same routes, `@CacheKey()`,
 * `@CacheTTL()` in ms) whose missing entry is built once across the fleet; `X-Cache` says `HIT`,
 * `MISS` or `STALE`. URL keys are the method, `Host` and URL (and the module's `http.vary`
 * headers), apart from every other key; a HEAD takes its GET's entry. A request with `Cookie` just runs, one with
 * `Authorization` takes and stores only responses marked `public`, `s-maxage` or
 * `must-revalidate`, unless `http.shareAuthorized`. Only what a shared cache may store is shared (a status cacheable
 * by default, no `Set-Cookie`, no `Cache-Control` `no-store`/`private`/`no-cache`, no `Vary: *`),
 * replayed with its status and `Content-Type`; errors, files and streams (`@Sse`, an Observable
 * that emits twice) are not. A `@MessagePattern` reply is cached by its pattern and data, a GraphQL
 * query's field by its path, arguments and parent; over WebSocket it only calls the handler.
 *
 * @example
 * ```ts
 * @Get('daily')
 * @UseInterceptors(BufferCacheInterceptor)
 * @CacheTTL(30_000)
 * daily(): Promise<Report> {
 *   return this.reports.buildDaily();
 * }
 * ```
 */
@Injectable()
export class BufferCacheInterceptor implements NestInterceptor {
  @Optional()
  @Inject(HttpAdapterHost)
  protected readonly httpAdapterHost?: HttpAdapterHost;

  @Optional()
  @Inject(BufferLockMessages)
  protected readonly messages: BufferLockMessages = new BufferLockMessages();

  protected allowedMethods: string[] = ['GET'];

  /** @internal This class's own `http` options, over the module's (see `with()`). */
  protected readonly routeOptions: Partial<HttpSettings> = {};

  private http?: HttpSettings;

  private read?: HeaderReader;

  /**
   * An interceptor class whose routes take `options` over the module's `http` option.
   *
   * @example
   * ```ts
   * @Controller('news')
   * @UseInterceptors(BufferCacheInterceptor.with({ vary: ['accept-language'] }))
   * export class NewsController {}
   * ```
   */
  static with(options: NonNullable<BufferLockOptions['http']>): Type<BufferCacheInterceptor> {
    const messages = new BufferLockMessages();
    if (!isPlainObject(options)) {
      const values = [{ name: 'http', value: shownValue(options), isDefault: false }];
      throw new BufferLockConfigError([configViolation(messages, 'http', 'http_invalid', values)]);
    }
    const own = validateOptions(HttpCacheOptionsDto, options, messages, 'partial');
    class RouteCacheInterceptor extends BufferCacheInterceptor {
      protected override readonly routeOptions: Partial<HttpSettings> = own;
    }
    return mixin(RouteCacheInterceptor);
  }

  constructor(
    @Inject(BufferCache) protected readonly cache: BufferCache,
    @Inject(Reflector) protected readonly reflector: Reflector,
  ) {}

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    // A message's reply is cached by its pattern and data, a query's field by its path,
    // arguments and parent; over WebSocket nothing is cached nor coalesced.
    const type = context.getType<'http' | 'rpc' | 'ws' | 'graphql'>();
    if (type === 'rpc') return this.message(context, next);
    if (type === 'graphql') return this.field(context, next);
    if (type !== 'http') return next.handle();
    // A POST, PUT, PATCH or DELETE that succeeds deletes its URL's entries (RFC 9111 §4.4).
    if (this.invalidates(context)) return this.invalidating(context, next);
    const handler = context.getHandler();
    if (streaming.has(handler) || this.reflector.get<unknown>(SSE_METADATA, handler)) {
      return next.handle();
    }
    const headers = this.headersOf(context);
    const { shareAuthorized } = this.httpSettings();
    // With `Cookie`, private (Varnish's rule): not cached, not coalesced, no `X-Cache`.
    if (!shareAuthorized && headers?.cookie !== undefined) return next.handle();
    const url = !this.customKey(context);
    // With `Authorization`, only a response that says it may be shared (RFC 9111 §3.5) is taken
    // or stored; under a key of the user's, which holds no such mark, it is private.
    const guarded = !shareAuthorized && headers?.authorization !== undefined;
    if (guarded && !url) return next.handle();
    const key = await this.trackBy(context);
    if (!key) return next.handle();

    let kept: Carried | undefined;
    let produced: { value: unknown } | undefined;
    let ran = false;
    let answered = false;
    let unsubscribe: (() => void) | undefined;
    const response: unknown = context.switchToHttp().getResponse();
    const read = (this.read ??= headerReader(this.httpAdapterHost?.httpAdapter));
    const head: Head = {};
    let making: Promise<unknown> | undefined;
    // Run once, whether for the URL's entry or for its request's variant.
    const factory = (): Promise<unknown> => (making ??= make());
    const make = async (): Promise<unknown> => {
      let made: { value: unknown } | Streamed;
      ran = true;
      // The route's own status and headers (`@HttpCode()`, `@Header()`): a hit sets them too.
      head.before ??= beforeOf(read, response);
      made = await handlerOutcome(next.handle(), (end) => (unsubscribe = end));
      if (made instanceof Streamed) {
        streaming.add(handler);
        // A refresh after this request was answered: no one takes the stream.
        if (answered) made.drop();
        throw (kept = new Carried(made));
      }
      const { value } = made;
      if (value instanceof StreamableFile) throw (kept = new Carried(value));
      produced = { value };
      const rules = this.httpSettings();
      const stored = storedOf({ body: value, read, response, head, rules, guarded, url, headers });
      // Not stored, and not shared with the requests waiting on it either: each runs its own.
      if (!stored) throw (kept = new Carried(value));
      return stored;
    };

    try {
      const options = await this.optionsOf(context);
      if (options === 'uncached') {
        // A negative TTL in cache-manager stores an entry that has already expired.
        this.setHeadersWhenHttp(context, 'miss');
        return next.handle();
      }
      // URL entries hold a `StoredResponse`: a key of their own, apart from earlier formats.
      const name = url ? urlEntry(String(key)) : String(key);
      let { value, status } = await this.cache[LOOKUP](
        name,
        factory,
        options,
        url ? 'u' : undefined,
      );
      let record = value as StoredResponse;
      // Made for other values of the headers its response varies by: this request's variant.
      if (url && record?.v && !answers(record.v, headers)) {
        const variant = variantOf(name, record.at, record.v, headers);
        ({ value, status } = await this.cache[LOOKUP](
          variant,
          factory,
          options,
          url ? 'u' : undefined,
        ));
        record = value as StoredResponse;
      }
      answered = true;
      // Stored from a response that did not say a request with `Authorization` may have it, or
      // varied by headers other than those its URL's entry named.
      if (url && (!answers(record?.v, headers) || (guarded && record?.a !== 1))) {
        this.setHeadersWhenHttp(context, 'miss');
        return next.handle();
      }
      this.setHeadersWhenHttp(context, status);
      const adapter = this.httpAdapterHost?.httpAdapter;
      if (!url) return of(value);
      const body = replay(adapter, read, response, record, head);
      // A fresh entry the client holds already (RFC 9110 §13.1.1, §13.1.3): no body, no handler.
      if (adapter && status === 'hit' && notModified(record, headers)) {
        adapter.status(response, 304);
        return of(undefined);
      }
      return of(body);
    } catch (error) {
      // A build that failed (past `hardTimeout`, say) while its handler's Observable ran.
      unsubscribe?.();
      // A response not to share (a file, a private one) goes to the request that made it only.
      if (kept && error === kept) {
        if (kept.value instanceof Streamed) return kept.value.stream;
        this.setHeadersWhenHttp(context, 'miss');
        return of(kept.value);
      }
      if (isHandlerOutcome(error)) {
        this.setHeadersWhenHttp(context, 'miss');
        // Another request's handler failed, or made a response not to share: this one runs its own.
        if (!ran) return next.handle();
        return throwError(() => (error instanceof Carried ? error.value : error));
      }
      const text = this.messages.render('cache_interceptor_failed', { ERROR: errorText(error) });
      Logger.error(text, 'BufferCacheInterceptor');
      if (!produced) return next.handle();
      this.setHeadersWhenHttp(context, 'miss');
      return of(produced.value);
    }
  }

  /**
   * A message's reply (`@MessagePattern`; never an event's), by its pattern and data (or
   * `@CacheKey()`).
   */
  private async message(
    context: ExecutionContext,
    next: CallHandler,
  ): Promise<Observable<unknown>> {
    const handler = context.getHandler();
    if (isEventHandler(this.reflector, handler)) return next.handle();
    const data: unknown = context.switchToRpc().getData();
    return this.keyed(context, next, () => messageKeyOf(patternOf(this.reflector, handler), data));
  }

  /**
   * A query's field (never a mutation's or a subscription's), by its path, arguments and parent
   * (or `@CacheKey()`); with `Authorization` or `Cookie` on the request, or none to be read, it
   * just runs, unless `http.shareAuthorized`.
   */
  private field(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const field = fieldOf(context);
    if (field.operation !== 'query') return Promise.resolve(next.handle());
    const { headers } = field;
    const personal =
      !headers || headers.authorization !== undefined || headers.cookie !== undefined;
    if (personal && !this.httpSettings().shareAuthorized) return Promise.resolve(next.handle());
    return this.keyed(context, next, () => field.key);
  }

  /**
   * The handler's value under `@CacheKey()`, else under `keyOf()`'s key, built once across the
   * fleet and not run on a hit. A value that streams (emits more than once) is sent live, as the
   * handler's errors are; none is cached.
   */
  private async keyed(
    context: ExecutionContext,
    next: CallHandler,
    keyOf: () => string | undefined,
  ): Promise<Observable<unknown>> {
    const handler = context.getHandler();
    if (streaming.has(handler)) return next.handle();
    const custom = this.customKey(context);
    const key =
      custom === undefined
        ? keyOf()
        : typeof custom === 'function'
          ? await custom(context)
          : custom;
    if (!key) return next.handle();
    const options = await this.optionsOf(context);
    if (options === 'uncached') return next.handle();
    const space = custom === undefined ? 'r' : undefined;
    const parts = { cache: this.cache, messages: this.messages };
    return keyedValue(parts, { handler, next, key: String(key), space, options });
  }

  /** The route's `@CacheTTL()` and `@CacheTags()` (on the handler, else its class) as options. */
  private async optionsOf(
    context: ExecutionContext,
  ): Promise<BufferCacheOptions | undefined | 'uncached'> {
    const ttlValueOrFactory =
      this.reflector.get<unknown>(CACHE_TTL_METADATA, context.getHandler()) ??
      this.reflector.get<unknown>(CACHE_TTL_METADATA, context.getClass()) ??
      null;
    const ttl =
      typeof ttlValueOrFactory === 'function'
        ? await (ttlValueOrFactory as Factory<unknown>)(context)
        : ttlValueOrFactory;
    return this.withTags(context, optionsOf(ttl));
  }

  /** The route's `@CacheTags()` (on the handler, else its class) added to its options. */
  private async withTags(
    context: ExecutionContext,
    options: BufferCacheOptions | undefined | 'uncached',
  ): Promise<BufferCacheOptions | undefined | 'uncached'> {
    const given =
      this.reflector.get<unknown>(CACHE_TAGS_METADATA, context.getHandler()) ??
      this.reflector.get<unknown>(CACHE_TAGS_METADATA, context.getClass());
    if (given === undefined || options === 'uncached') return options;
    const tags = typeof given === 'function' ? await (given as Factory<unknown>)(context) : given;
    // What is no array of tags is refused by the cache, in its words.
    return { ...options, tags: tags as string[] };
  }

  /**
   * `@CacheKey()` (a key of the user's), else a URL key of a cacheable HTTP request (method,
   * `Host`, URL, `vary` headers), else none (not cached).
   */
  protected trackBy(
    context: ExecutionContext,
  ): Promise<string | undefined | null> | string | undefined | null {
    const httpAdapter = this.httpAdapterHost?.httpAdapter;
    const isHttpApp = !!httpAdapter && !!httpAdapter.getRequestMethod;
    const keyOrFactory = this.customKey(context);
    if (!isHttpApp || keyOrFactory) {
      return typeof keyOrFactory === 'function' ? keyOrFactory(context) : keyOrFactory;
    }
    const request: unknown = context.getArgByIndex(0);
    if (!this.isRequestCacheable(context)) return undefined;
    const headers = this.headersOf(context) ?? {};
    const varied = variedOf(headers, this.httpSettings().vary);
    const url: unknown = httpAdapter.getRequestUrl(request);
    const host = hostOf(headers.host, request);
    return urlKey(cachedMethod(httpAdapter.getRequestMethod(request)), host, url, varied);
  }

  private customKey(
    context: ExecutionContext,
  ): string | Factory<string | undefined | null> | undefined {
    return this.reflector.get(CACHE_KEY_METADATA, context.getHandler());
  }

  private headersOf(context: ExecutionContext): RequestHeaders | undefined {
    if (context.getType() !== 'http') return undefined;
    return context.switchToHttp().getRequest<{ headers?: RequestHeaders } | undefined>()?.headers;
  }

  private httpSettings(): HttpSettings {
    return (this.http ??= over(this.routeOptions, this.cache[HTTP]));
  }

  /** An unsafe method on a URL route, unless this class caches it (`allowedMethods`). */
  private invalidates(context: ExecutionContext): boolean {
    const method = context.switchToHttp().getRequest<{ method?: string } | undefined>()?.method;
    if (!UNSAFE_METHODS.has(method) || this.isRequestCacheable(context)) return false;
    return !this.customKey(context) && !!this.httpAdapterHost?.httpAdapter?.getRequestUrl;
  }

  private invalidating(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const adapter = this.httpAdapterHost!.httpAdapter;
    const read = (this.read ??= headerReader(adapter));
    const parts = { cache: this.cache, messages: this.messages, adapter, read };
    return invalidating(context, next.handle(), { ...parts, vary: this.httpSettings().vary });
  }

  protected isRequestCacheable(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest<{ method?: string } | undefined>();
    return this.allowedMethods.includes(cachedMethod(request?.method) as string);
  }

  protected setHeadersWhenHttp(context: ExecutionContext, status: 'hit' | 'miss' | 'stale'): void {
    const httpAdapter = this.httpAdapterHost?.httpAdapter;
    if (!httpAdapter || context.getType() !== 'http') return;
    const response: unknown = context.switchToHttp().getResponse();
    httpAdapter.setHeader(response, 'X-Cache', status.toUpperCase());
  }
}
