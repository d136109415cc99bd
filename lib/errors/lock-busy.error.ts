import { ConflictException } from '@nestjs/common';

/**
 * Thrown by a `@SingleFlight` method with `onBusy: 'throw'` when another worker holds the lock:
 * HTTP 409 with the `lock_busy` text. The cache key stays on the error, out of the body.
 *
 * @example
 * ```ts
 * if (e instanceof LockBusyError) console.log('busy:', e.cacheKey);
 * ```
 */
export class LockBusyError extends ConflictException {
  override readonly name = 'LockBusyError';
  readonly code = 'lock_busy';

  constructor(
    message: string,
    readonly cacheKey: string,
  ) {
    super({ statusCode: 409, code: 'lock_busy', message });
  }
}
