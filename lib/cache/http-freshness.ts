// What a response's `Cache-Control` tells a shared cache (RFC 9111 §5.2.2).
import type { HeaderReader } from './http-response.js';

/** The response's `Cache-Control` directives, by lower-case name (a value, or `true`). */
export function directivesOf(read: HeaderReader, response: unknown): Map<string, string | true> {
  const given = read(response, 'cache-control');
  const text = Array.isArray(given) ? given.join(',') : typeof given === 'string' ? given : '';
  const directives = new Map<string, string | true>();
  for (const part of text.split(',')) {
    const at = part.indexOf('=');
    const name = (at < 0 ? part : part.slice(0, at)).trim().toLowerCase();
    if (name === '' || directives.has(name)) continue;
    directives.set(
      name,
      at < 0
        ? true
        : part
            .slice(at + 1)
            .trim()
            .replace(/^"(.*)"$/, '$1'),
    );
  }
  return directives;
}

/**
 * Whether a request with `Authorization` may be answered with the response (RFC 9111 §3.5):
 * `public`, `s-maxage` or `must-revalidate`.
 */
export const sharesAuthorized = (directives: Map<string, string | true>): boolean =>
  directives.has('public') || directives.has('s-maxage') || directives.has('must-revalidate');

/** Seconds an entry is fresh, and stale-servable after, as its response says; what it leaves out is the route's. */
export interface Freshness {
  readonly ttl?: number;
  readonly grace?: number;
}

/** The response's freshness limits a shared cache honours. */
export interface FreshnessRules {
  readonly maxTtl: number;
  readonly requireFreshness: boolean;
}

const DELTA_SECONDS = /^\d+$/;

// A delta-seconds value; an invalid one is 0: the response is stale (RFC 9111 §1.2.2).
const secondsOf = (value: string | true): number =>
  typeof value === 'string' && DELTA_SECONDS.test(value) ? Number(value) : 0;

/**
 * The entry's `ttl` from `s-maxage`, else `max-age`, else `Expires` less `Date` (or now), at most
 * `maxTtl`, and its `grace` from `stale-while-revalidate`; `'refused'` when the response is
 * already stale, or says nothing of its freshness under `requireFreshness`.
 */
export function freshnessOf(
  directives: Map<string, string | true>,
  read: HeaderReader,
  response: unknown,
  rules: FreshnessRules,
  now: number,
): Freshness | 'refused' {
  const limit = directives.get('s-maxage') ?? directives.get('max-age');
  let ttl: number | undefined;
  if (limit !== undefined) ttl = secondsOf(limit);
  else {
    const expires = read(response, 'expires');
    if (typeof expires === 'string') {
      const date = read(response, 'date');
      const from = typeof date === 'string' ? Date.parse(date) : NaN;
      // An invalid date (`0`) is one in the past.
      ttl = Math.max(0, ((Date.parse(expires) || 0) - (Number.isNaN(from) ? now : from)) / 1000);
    }
  }
  if (ttl === undefined && rules.requireFreshness) return 'refused';
  if (ttl !== undefined && !(ttl > 0)) return 'refused';
  const revalidate = directives.get('stale-while-revalidate');
  const grace = revalidate === undefined ? undefined : secondsOf(revalidate);
  return {
    ttl: ttl === undefined ? undefined : Math.min(ttl, rules.maxTtl),
    grace: grace === undefined ? undefined : Math.min(grace, rules.maxTtl),
  };
}
