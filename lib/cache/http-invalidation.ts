// The interceptor's URL keys, and what a POST, PUT, PATCH or DELETE that succeeded deletes of them
// (RFC 9111 §4.4).
import { Logger, type ExecutionContext } from '@nestjs/common';
import { concat, defer, ignoreElements, type Observable } from 'rxjs';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { BufferCache } from './buffer-cache.service.js';
import { DELETE_URL } from './cache-keys.js';
import { hostOf, type RequestHeaders } from './http-request.js';
import type { HeaderReader } from './http-response.js';

/** Methods whose success invalidates the entries of their URL. */
export const UNSAFE_METHODS: ReadonlySet<unknown> = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** The URL key `trackBy` gives a request: its method, `Host`, URL and its `vary` headers' values. */
export function urlKey(method: unknown, host: unknown, url: unknown, varied: unknown[]): string {
  return JSON.stringify([method, host, url, ...varied]);
}

/** The cache's name of a URL key's entry: its format first, apart from earlier formats' entries. */
export function urlEntry(key: string): string {
  return `r3${key}`;
}

/** The values of the `vary` headers in a request: part of its URL key. */
export function variedOf(headers: RequestHeaders, vary: readonly string[]): unknown[] {
  return vary.map((name) => headers[name.toLowerCase()] ?? null);
}

/** What the interceptor hands over: its cache, texts, platform and `vary` headers. */
export interface InvalidationParts {
  readonly cache: BufferCache;
  readonly messages: BufferLockMessages;
  readonly adapter: { getRequestUrl(request: unknown): unknown };
  readonly read: HeaderReader;
  readonly vary: readonly string[];
}

/**
 * The handler's answer, held until the GET entries its request invalidates are deleted
 * fleet-wide, if it succeeded (2xx, 3xx): its URL's and those of a `Location` or
 * `Content-Location` of the same host, each in the variant of its own `vary` headers and in the
 * one without them (no other variant can be named). A failure to delete is logged: the answer
 * stays the handler's.
 */
export function invalidating(
  context: ExecutionContext,
  answer: Observable<unknown>,
  parts: InvalidationParts,
): Observable<unknown> {
  return concat(answer, defer(() => invalidate(context, parts)).pipe(ignoreElements()));
}

async function invalidate(context: ExecutionContext, parts: InvalidationParts): Promise<void> {
  const http = context.switchToHttp();
  const request: unknown = http.getRequest();
  const response: unknown = http.getResponse();
  let url: unknown;
  try {
    const status = (response as { statusCode?: unknown } | undefined)?.statusCode;
    if (typeof status !== 'number' || status < 200 || status >= 400) return;
    url = parts.adapter.getRequestUrl(request);
    const headers = (request as { headers?: RequestHeaders } | undefined)?.headers ?? {};
    const urls = new Set([url]);
    for (const header of ['location', 'content-location']) {
      const path = sameHostPath(parts.read(response, header), headers.host, url);
      if (path !== undefined) urls.add(path);
    }
    const host = hostOf(headers.host, request);
    const varied = variedOf(headers, parts.vary);
    const bare = varied.map(() => null);
    const variants = varied.some((value) => value !== null) ? [varied, bare] : [varied];
    const names = [...urls].flatMap((path) =>
      variants.map((values) => urlEntry(urlKey('GET', host, path, values))),
    );
    await Promise.all(names.map((name) => parts.cache[DELETE_URL](name)));
  } catch (error) {
    const text = parts.messages.render('cache_invalidation_failed', {
      URL: String(url),
      ERROR: errorText(error),
    });
    Logger.error(text, 'BufferCacheInterceptor');
  }
}

// A header's URL, as the path and query a request for it sends, when it is on the request's host.
function sameHostPath(value: unknown, host: unknown, url: unknown): string | undefined {
  if (typeof value !== 'string' || value === '') return undefined;
  try {
    const origin = new URL(`http://${typeof host === 'string' ? host : 'host.invalid'}`);
    const target = new URL(value, new URL(String(url), origin));
    return target.host === origin.host ? `${target.pathname}${target.search}` : undefined;
  } catch {
    return undefined;
  }
}
