// What a shared cache may keep of a handler's response: RFC 9111 §3 and Varnish's built-in
// `vcl_backend_response`, read from the platform's response object once the handler ran.

/** Statuses cacheable by default (RFC 9110 §15.1). */
export const CACHEABLE_STATUSES: ReadonlySet<number> = new Set([
  200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501,
]);

// Directives that keep a response out of a shared cache (`no-cache`: not served without its
// handler, which a shared entry would be).
const REFUSED = new Set(['no-store', 'private', 'no-cache']);

/** Reads one response header: the adapter's `getHeader()` where it has one, else the response's. */
export type HeaderReader = (response: unknown, name: string) => unknown;

type Adapter = { getHeader?: (response: unknown, name: string) => unknown } | undefined;

export function headerReader(adapter: Adapter): HeaderReader {
  const getHeader = adapter?.getHeader;
  if (typeof getHeader === 'function') {
    return (response, name) => getHeader.call(adapter, response, name);
  }
  return (response, name) =>
    (response as { getHeader?: (name: string) => unknown } | undefined)?.getHeader?.(name);
}

/** The status and `Content-Type` a response has so far: what a replay sets again. */
export interface ResponseHead {
  readonly status: number | undefined;
  readonly type: string | undefined;
}

export function headOf(read: HeaderReader, response: unknown): ResponseHead {
  const status = (response as { statusCode?: unknown } | undefined)?.statusCode;
  const type = read(response, 'content-type');
  return {
    status: typeof status === 'number' ? status : undefined,
    type: typeof type === 'string' ? type : undefined,
  };
}

const list = (value: unknown): string[] =>
  (Array.isArray(value) ? value.join(',') : typeof value === 'string' ? value : '')
    .split(',')
    .map((part) => part.trim().toLowerCase())
    .filter((part) => part !== '');

/**
 * Whether a shared cache may store the response: a status cacheable by default, no `Set-Cookie`,
 * no `Vary: *`, no `Cache-Control` `no-store`, `private` or `no-cache` (with or without fields).
 */
export function isStorable(
  read: HeaderReader,
  response: unknown,
  status: number | undefined,
): boolean {
  if (status === undefined || !CACHEABLE_STATUSES.has(status)) return false;
  const cookie = read(response, 'set-cookie');
  if (cookie !== undefined && cookie !== null && !(Array.isArray(cookie) && !cookie.length)) {
    return false;
  }
  if (list(read(response, 'vary')).includes('*')) return false;
  const directives = list(read(response, 'cache-control'));
  return !directives.some((directive) => REFUSED.has(directive.split('=')[0]!.trim()));
}
