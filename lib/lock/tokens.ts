import { randomFillSync } from 'node:crypto';

const TOKEN_BYTES = 24; // a multiple of 3: base64url without padding, 4 characters per 3 bytes
const TOKEN_CHARS = (TOKEN_BYTES / 3) * 4;
const TOKENS_PER_FILL = 256;

// One CSPRNG call and one base64url encoding serve 256 tokens: both cost far more per call than
// per byte. Every TOKEN_CHARS-long slice of the text is exactly the encoding of its own bytes.
const tokenBytes = Buffer.allocUnsafe(TOKEN_BYTES * TOKENS_PER_FILL);
let tokenText = '';
let tokenOffset = 0;

/**
 * A fresh 32-character token from the CSPRNG.
 *
 * @example
 * ```ts
 * const guard: LockGuard = { key: redisKey, token: createToken() };
 * ```
 */
export const createToken = (): string => {
  if (tokenOffset === tokenText.length) {
    randomFillSync(tokenBytes);
    tokenText = tokenBytes.toString('base64url');
    tokenOffset = 0;
  }
  tokenOffset += TOKEN_CHARS;
  return tokenText.slice(tokenOffset - TOKEN_CHARS, tokenOffset);
};
