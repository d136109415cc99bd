import { hash, randomFillSync } from 'node:crypto';

/** A fencing number as the script's INCR gives it: a positive safe integer. */
export const isFence = (answer: unknown): answer is number =>
  typeof answer === 'number' && Number.isSafeInteger(answer) && answer > 0;

// No UTF-8 has this byte: keys with lone surrogates (U+FFFD in UTF-8) stay apart from all others.
const NOT_UTF8 = Buffer.from([0xff]);

export function hashedKey(namespace: string, cacheKey: string): string {
  // String.prototype.isWellFormed is ES2024; the library compiles against ES2023.
  if ((cacheKey as string & { isWellFormed(): boolean }).isWellFormed()) {
    // One-shot crypto.hash: a third of createHash's cost per call.
    return namespace + hash('md5', cacheKey, 'hex');
  }
  const units = Buffer.from(cacheKey, 'utf16le');
  return namespace + hash('md5', Buffer.concat([NOT_UTF8, units]), 'hex');
}

// One CSPRNG call and one base64url encoding serve 256 tokens of 24 bytes (32 characters): both
// cost far more per call than per byte, and every 32-character slice encodes its own 24 bytes.
const TOKEN_CHARS = 32;
const tokenBytes = Buffer.allocUnsafe(24 * 256);
let tokenText = '';
let tokenOffset = 0;

export function createToken(): string {
  if (tokenOffset === tokenText.length) {
    randomFillSync(tokenBytes);
    tokenText = tokenBytes.toString('base64url');
    tokenOffset = 0;
  }
  tokenOffset += TOKEN_CHARS;
  return tokenText.slice(tokenOffset - TOKEN_CHARS, tokenOffset);
}
