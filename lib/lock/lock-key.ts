import { hash } from 'node:crypto';

/** String.prototype.isWellFormed (Node 20, ES2024; the library compiles against ES2023). */
type WellFormedTest = string & { isWellFormed(): boolean };

/** A byte no UTF-8 text contains: the prefix that keeps keys with lone surrogates apart. */
const NOT_UTF8 = Buffer.from([0xff]);

/**
 * `namespace`, then the hex MD5 of `cacheKey`'s UTF-8 bytes. A key that is not well-formed UTF-16
 * (it has a lone surrogate, such as `'\uD800'`) has no UTF-8 form: UTF-8 would turn each lone
 * surrogate into U+FFFD, so `'\uD800'`, `'\uDBFF'` and `'\uFFFD'` would share one lock. Such a
 * key is hashed as the byte 0xFF, which no UTF-8 text contains, then its UTF-16LE code units:
 * distinct keys get distinct locks, and every well-formed key keeps the key it always had.
 *
 * @example
 * ```ts
 * hashedKey('buffer:', 'nightly-report'); // 'buffer:' + 32 hex digits
 * ```
 */
export function hashedKey(namespace: string, cacheKey: string): string {
  // One-shot crypto.hash (UTF-8 for strings): a third of createHash's cost per call.
  if ((cacheKey as WellFormedTest).isWellFormed()) return namespace + hash('md5', cacheKey, 'hex');
  const units = Buffer.from(cacheKey, 'utf16le');
  return namespace + hash('md5', Buffer.concat([NOT_UTF8, units]), 'hex');
}
