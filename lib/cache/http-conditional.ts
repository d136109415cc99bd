// Conditional requests on an entry (RFC 9110 §13): its validators, and whether a request's
// `If-None-Match` or `If-Modified-Since` says the client holds it already.
import { createHash } from 'node:crypto';
import type { RequestHeaders } from './http-request.js';

/** A weak ETag made from the stored body, for an entry whose handler gave none. */
export const weakTag = (body: unknown): string =>
  `W/"${createHash('sha1')
    .update(JSON.stringify(body) ?? '')
    .digest('base64url')}"`;

const opaque = (tag: string): string => tag.trim().replace(/^W\//, '');

/**
 * Whether the request's validators match an entry's (`h`: its headers, `e`: its weak ETag):
 * `If-None-Match` (weak comparison, `*` any), else `If-Modified-Since` against `Last-Modified`.
 */
export function notModified(
  { h, e }: { readonly h?: Readonly<Record<string, string>>; readonly e?: string },
  headers: RequestHeaders | undefined,
): boolean {
  const [tag, modified] = [h?.etag ?? e, h?.['last-modified']];
  const match = headers?.['if-none-match'];
  if (typeof match === 'string') {
    if (match.trim() === '*') return true;
    return tag !== undefined && match.split(',').some((given) => opaque(given) === opaque(tag));
  }
  const since = headers?.['if-modified-since'];
  if (typeof since !== 'string' || modified === undefined) return false;
  const [at, held] = [Date.parse(modified), Date.parse(since)];
  return !Number.isNaN(at) && !Number.isNaN(held) && at <= held;
}
