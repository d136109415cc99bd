// A URL key's entry: what a hit replays of the response its handler made, and what a handler's
// response gives the cache.
import { weakTag } from './http-conditional.js';
import type { RequestHeaders } from './http-request.js';
import {
  directivesOf,
  freshnessOf,
  sharesAuthorized,
  type FreshnessRules,
} from './http-freshness.js';
import { headOf, isStorable, type HeaderReader, type ResponseHead } from './http-response.js';
import { variedBy, type Varied } from './http-vary.js';
import { Timed } from './timed.js';

/** The representation headers an entry keeps (RFC 9110 §8), replayed with it: no other header. */
export const REPRESENTATION = [
  'content-type',
  'content-language',
  'content-disposition',
  'etag',
  'last-modified',
  'cache-control',
  'expires',
  'vary',
] as const;

/**
 * The stored response, with short names (one is stored with every entry): the body, the status
 * the handler set (when not the route's own), its representation headers, whether a request with
 *  `Authorization` may be answered with it, when it was made (epoch ms, for `Age`) and what it varies by.
 */
export interface StoredResponse {
  readonly b: unknown;
  readonly s?: number;
  readonly h?: Readonly<Record<string, string>>;
  readonly a?: 1;
  readonly at: number;
  /** A weak ETag made from the body, when its handler gave none. */
  readonly e?: string;
  /** The request headers its response varies by, and the values it was made for. */
  readonly v?: Varied;
}

type Headers = Record<string, string>;

/** The response as a replay leaves it: the route's own head, and what the replay set over it. */
export interface Head {
  before?: ResponseHead & { readonly headers: Readonly<Headers> };
  /** Status (`:status`) and headers the replay set, by lower-case name. */
  replayed?: Headers;
  /** The weak ETag the replay set: not one a handler gave. */
  weak?: string;
}

const text = (value: unknown): string | undefined =>
  typeof value === 'string'
    ? value
    : typeof value === 'number'
      ? String(value)
      : Array.isArray(value)
        ? value.join(', ')
        : undefined;

/** The representation headers (or the headers `names`) a response has so far. */
export function headersOf(
  read: HeaderReader,
  response: unknown,
  names: readonly string[] = REPRESENTATION,
): Headers {
  const headers: Headers = {};
  for (const name of names) {
    const value = text(read(response, name));
    if (value !== undefined) headers[name] = value;
  }
  return headers;
}

/** The response's head (status, `Content-Type`, representation headers) before a handler runs. */
export const beforeOf = (read: HeaderReader, response: unknown): NonNullable<Head['before']> => ({
  ...headOf(read, response),
  headers: headersOf(read, response),
});

/** What the interceptor knows of a request whose handler just made `body`. */
export interface Made {
  readonly body: unknown;
  readonly read: HeaderReader;
  readonly response: unknown;
  readonly head: Head;
  readonly rules: FreshnessRules;
  /** A request with `Authorization`: only a response marked shared is stored. */
  readonly guarded: boolean;
  /** A URL key's entry (a `StoredResponse`), else a key of the user's (the value alone). */
  readonly url: boolean;
  readonly headers: RequestHeaders | undefined;
}

/**
 * What to store of the response, with the freshness it gives, or `undefined`: a shared cache
 * may not store it, or what its handler set cannot be told from what a replay set on it.
 */
export function storedOf(made: Made): Timed | undefined {
  const { body, read, response, head } = made;
  const before = head.before!;
  const after = headOf(read, response);
  if (!isStorable(read, response, after.status)) return undefined;
  const headers = headersOf(read, response);
  if (head.weak !== undefined && headers.etag === head.weak) delete headers.etag;
  if (head.replayed && !ownHead(head.replayed, before, after.status, headers)) return undefined;
  const directives = directivesOf(read, response);
  const shared = sharesAuthorized(directives);
  if (made.guarded && !shared) return undefined;
  // Stale already (`max-age=0`, a past `Expires`), or of unknown freshness when it must be known.
  const fresh = freshnessOf(directives, read, response, made.rules, Date.now());
  if (fresh === 'refused') return undefined;
  const status = after.status === before.status ? undefined : after.status;
  if (!made.url) {
    // A key of the user's holds the value alone: what the handler changed is not kept.
    return status === undefined && after.type === before.type
      ? new Timed(body, fresh.ttl, fresh.grace)
      : undefined;
  }
  const record: { -readonly [K in keyof StoredResponse]: StoredResponse[K] } = {
    b: body,
    at: Date.now(),
  };
  if (status !== undefined) record.s = status;
  if (Object.keys(headers).length > 0) record.h = headers;
  if (shared) record.a = 1;
  if (headers.etag === undefined) record.e = weakTag(body);
  const varied = variedBy(read, response, made.headers);
  if (varied) record.v = varied;
  return new Timed(record, fresh.ttl, fresh.grace);
}

/**
 * Whether what the handler set can be told from what a replay set before it ran (a refresh
 * behind a stale answer): nothing the replay set over the route's own is still there as it was.
 */
function ownHead(
  replayed: Headers,
  before: NonNullable<Head['before']>,
  status: number | undefined,
  headers: Headers,
): boolean {
  for (const [name, value] of Object.entries(replayed)) {
    const now = name === ':status' ? String(status) : headers[name];
    const own = name === ':status' ? String(before.status) : before.headers[name];
    if (now === value && value !== own) return false;
  }
  return true;
}

type Replayer = {
  status(response: unknown, code: number): unknown;
  setHeader(response: unknown, name: string, value: string): unknown;
};

/**
 * The stored body, with the status and representation headers its handler set, and `Age`: the
 * seconds since it was made.
 */
export function replay(
  adapter: Replayer | undefined,
  read: HeaderReader,
  response: unknown,
  { b, s, h, at, e }: StoredResponse,
  head: Head,
): unknown {
  if (!adapter) return b;
  head.before ??= beforeOf(read, response);
  const replayed: Headers = (head.replayed ??= {});
  if (s !== undefined) {
    adapter.status(response, s);
    replayed[':status'] = String(s);
  }
  for (const [name, value] of Object.entries(h ?? {})) {
    adapter.setHeader(response, name, value);
    replayed[name] = value;
  }
  if (e !== undefined && h?.etag === undefined) {
    adapter.setHeader(response, 'ETag', e);
    head.weak = e;
  }
  adapter.setHeader(response, 'Age', String(Math.max(0, Math.floor((Date.now() - at) / 1000))));
  return b;
}
