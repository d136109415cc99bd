// What the interceptor reads of a request: its key's `Host` and its `@CacheTTL()` as cache options.
import type { BufferCacheOptions } from '../options/cache.options.js';

// `@CacheTTL(0)` is "never expires" in cache-manager.
const FOREVER_SECONDS = 100 * 365 * 24 * 3600;

type Socket = { socket?: { localPort?: number } };

/** A request's headers, as Express and Fastify give them (names in lower case). */
export type RequestHeaders = Readonly<Record<string, string | string[] | undefined>>;

/**
 * The Host without the port the request came in on, which says nothing the server does not know
 * (supertest's per-request port); any other port stays: an unkeyed port poisons caches.
 */
export function hostOf(host: string | string[] | undefined, request: unknown): unknown {
  const port = /^([^:]*|\[.*\]):(\d+)$/.exec(typeof host === 'string' ? host : '');
  const { socket, raw } = (request ?? {}) as Socket & { raw?: Socket };
  const local = socket?.localPort ?? raw?.socket?.localPort;
  return port && local !== undefined && Number(port[2]) === local ? port[1] : host;
}

/** The method a request is cached as: a HEAD is answered from its GET's entry, as Varnish does. */
export const cachedMethod = (method: unknown): unknown => (method === 'HEAD' ? 'GET' : method);

/** `@CacheTTL()` (ms) as cache options; what is no number is handed on to be refused. */
export function optionsOf(ttl: unknown): BufferCacheOptions | undefined | 'uncached' {
  if (ttl === null || ttl === undefined) return undefined;
  if (typeof ttl !== 'number' || Number.isNaN(ttl)) return { ttl: ttl as number };
  if (ttl < 0) return 'uncached';
  if (ttl === 0 || ttl === Infinity) return { ttl: FOREVER_SECONDS };
  return { ttl: Math.max(1, Math.round(ttl)) / 1000 };
}

/** A route's options over the module's: each one it gives. */
export function over<T extends object>(route: Partial<T>, module: T): T {
  const settings = { ...module } as Record<string, unknown>;
  for (const [name, value] of Object.entries(route))
    if (value !== undefined) settings[name] = value;
  return settings as T;
}
