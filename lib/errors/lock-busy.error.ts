import { ConflictException } from '@nestjs/common';

/**
 * Thrown by a `@SingleFlight` method with `onBusy: 'throw'` when another worker holds the lock.
 * It is a Nest `ConflictException`, so an HTTP handler answers 409 with the catalog's `lock_busy`
 * text as the body's `message`. The cache key is kept on the error, not in the body.
 *
 * @example
 * ```ts
 * try {
 *   await reports.rebuild('daily');
 * } catch (e) {
 *   if (e instanceof LockBusyError) console.log('busy:', e.cacheKey);
 * }
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
