// What `@Idempotent` keeps of a completed request, and whose key it is.
import { digest } from './call-digest.js';
import { headersOf, REPRESENTATION } from './http-entry.js';
import type { RequestHeaders } from './http-request.js';
import { headOf, type HeaderReader } from './http-response.js';

/** The headers a replay sets again: the representation's, and where a created resource is. */
const REPLAYED = [...REPRESENTATION, 'location', 'content-location'] as const;

/** A completed request's response, with short names (one per key, for `expiresAfter`). */
export interface IdempotencyRecord {
  /** The fingerprint of the request that made it: a reuse of its key with another is refused. */
  readonly f: string;
  /** The status, when the handler's response had one. */
  readonly s?: number;
  readonly h?: Readonly<Record<string, string>>;
  readonly b: unknown;
  /** A 4xx error the handler threw (`storeErrors`): `b` is its response body, replayed as one. */
  readonly x?: 1;
}

/** Where a key's record lives: the caller's scope and the key, hashed (no raw key reaches Redis). */
export const recordKeyOf = (scope: string, key: string): string =>
  digest(JSON.stringify([scope, key]));

/** The default scope: the credentials the request carries, so no caller replays another's key. */
export const defaultScope = (headers: RequestHeaders | undefined): string =>
  JSON.stringify([headers?.authorization ?? null, headers?.cookie ?? null]);

/** The record of a handler's response: its status and the headers a replay sets again. */
export function recordOf(
  fingerprint: string,
  body: unknown,
  read: HeaderReader,
  response: unknown,
): IdempotencyRecord {
  const { status } = headOf(read, response);
  const headers = headersOf(read, response, REPLAYED);
  return {
    f: fingerprint,
    b: body,
    ...(status === undefined ? {} : { s: status }),
    ...(Object.keys(headers).length > 0 ? { h: headers } : {}),
  };
}
