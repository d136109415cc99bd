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
