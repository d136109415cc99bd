import { attempt } from '../messages/error-text.js';
import type { LockError } from '../errors/lock.error.js';
import type { MessageId } from '../messages/messages.catalog.js';
import { isFence } from './lock-keys.js';
import type { AcquireResult, ExtendResult, LockGuard } from './lock-results.js';
import type { FoundInstead, WriteResult } from './lock-symbols.js';

/**
 * What an acquire script's `answer` means for `guard` (`looked`: it looked for an entry first);
 * only the replies Redis gives count.
 */
export function acquireReply(
  answer: unknown,
  guard: LockGuard,
  fencing: boolean,
  looked: boolean,
  error: (id: MessageId) => LockError,
): AcquireResult | FoundInstead {
  if (answer === undefined || answer === null) return [undefined, error('redis_no_result')];
  if (looked && typeof answer === 'string') return { found: answer };
  // A Symbol, `true`, `'1'` or `[1]` is no lock.
  if (answer === 0) return [undefined, undefined];
  if (fencing) {
    return isFence(answer)
      ? [{ ...guard, fence: answer }, undefined]
      : [undefined, error('redis_bad_reply')];
  }
  return answer === 1 ? [guard, undefined] : [undefined, error('redis_bad_reply')];
}

/** What an extend script's `answer` means. */
export function extendReply(answer: unknown, error: (id: MessageId) => LockError): ExtendResult {
  if (answer === undefined || answer === null) return [false, error('redis_no_result')];
  if (answer === 0) return [false, undefined];
  return answer === 1 ? [true, undefined] : [false, error('redis_bad_reply')];
}

/** What a release script's `answer` means; `writing`: a write went with it. */
export function releaseReply(
  answer: unknown,
  writing: boolean,
  error: (id: MessageId) => LockError,
): WriteResult {
  if (answer === undefined || answer === null) return [false, error('redis_no_result')];
  // A reply that is no number (a null-prototype object, say) is no write, not a throw.
  return [!writing || attempt(() => Number(answer) === 1, false), undefined];
}
