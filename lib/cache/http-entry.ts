// A URL key's entry: what a hit replays of the response its handler made.
import { headOf, type HeaderReader, type ResponseHead } from './http-response.js';

/**
 * The stored response, with short names (one is stored with every entry): the body, the status
 * and `Content-Type` the handler set (when not the route's own), and whether a request with
 * `Authorization` may be answered with it.
 */
export interface StoredResponse {
  readonly b: unknown;
  readonly s?: number;
  readonly t?: string;
  readonly a?: 1;
}

/** The route's own status and `Content-Type`, read before a replay sets the entry's. */
export interface Head {
  before?: ResponseHead;
  replayed: boolean;
}

/** What to store of the handler's response: what it set over the route's own. */
export function recordOf(
  body: unknown,
  before: ResponseHead,
  after: ResponseHead,
  sharesAuthorized: boolean,
): StoredResponse {
  const record: { -readonly [K in keyof StoredResponse]: StoredResponse[K] } = { b: body };
  if (after.status !== before.status && after.status !== undefined) record.s = after.status;
  if (after.type !== before.type && after.type !== undefined) record.t = after.type;
  if (sharesAuthorized) record.a = 1;
  return record;
}

type Replayer = {
  status(response: unknown, code: number): unknown;
  setHeader(response: unknown, name: string, value: string): unknown;
};

/** The stored body, with the status and `Content-Type` its handler set. */
export function replay(
  adapter: Replayer | undefined,
  read: HeaderReader,
  response: unknown,
  { b, s, t }: StoredResponse,
  head: Head,
): unknown {
  if (!adapter || (s === undefined && t === undefined)) return b;
  head.before ??= headOf(read, response);
  head.replayed = true;
  if (s !== undefined) adapter.status(response, s);
  if (t !== undefined) adapter.setHeader(response, 'Content-Type', t);
  return b;
}
