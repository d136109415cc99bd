// A response's `Vary` (RFC 9110 §12.5.5): the request headers its URL's entries vary by, as
// Varnish and nginx key them.
import type { RequestHeaders } from './http-request.js';
import type { HeaderReader } from './http-response.js';

/** The request headers a response varies by (lower case, sorted), and the values it was made for. */
export type Varied = readonly [names: readonly string[], values: readonly (string | null)[]];

const valueOf = (headers: RequestHeaders | undefined, name: string): string | null => {
  const value = headers?.[name];
  return Array.isArray(value) ? value.join(', ') : (value ?? null);
};

/** What a response's `Vary` names, with the request's values of them; none without `Vary`. */
export function variedBy(
  read: HeaderReader,
  response: unknown,
  headers: RequestHeaders | undefined,
): Varied | undefined {
  const given = read(response, 'vary');
  const text = Array.isArray(given) ? given.join(',') : typeof given === 'string' ? given : '';
  const names = [...new Set(text.split(',').map((name) => name.trim().toLowerCase()))]
    .filter((name) => name !== '')
    .toSorted();
  return names.length > 0 ? [names, names.map((name) => valueOf(headers, name))] : undefined;
}

/** Whether an entry made for `varied` answers a request with `headers`. */
export const answers = (varied: Varied | undefined, headers: RequestHeaders | undefined): boolean =>
  !varied || varied[0].every((name, at) => valueOf(headers, name) === varied[1][at]);

/**
 * The entry name of the request's variant of a URL entry made at `at`: a variant of another
 * generation of that entry (deleted, rebuilt) is never named again.
 */
export const variantOf = (
  name: string,
  at: number,
  [names]: Varied,
  headers: RequestHeaders | undefined,
): string => `${name}\0${at}\0${JSON.stringify(names.map((header) => valueOf(headers, header)))}`;
