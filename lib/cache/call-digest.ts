// A call's digest: the same method (or kind), target and body always give the same text, two
// different ones never do. `@Idempotent`'s fingerprints and the interceptor's message and field keys.
import { createHash } from 'node:crypto';
import { inspect } from 'node:util';

export const digest = (text: string): string =>
  createHash('sha256').update(text).digest('base64url');

// Any value (a body a platform parsed or left raw, a pattern object) as text: one value always
// gives the same, and two of different kinds never do.
const textOf = (body: unknown): string => {
  if (typeof body === 'string') return `s${body}`;
  if (Buffer.isBuffer(body)) return `b${body.toString('base64')}`;
  try {
    return `j${JSON.stringify(body) ?? ''}`;
  } catch {
    return `i${inspect(body, { depth: Infinity, sorted: true })}`;
  }
};

/** A call as a fingerprint or a key sees it: its method (or kind), target (a URL, a pattern, a field) and body. */
export const fingerprintOf = (method: unknown, target: unknown, body: unknown): string =>
  digest(JSON.stringify([String(method), textOf(target), textOf(body)]));
