import { ServiceUnavailableException } from '@nestjs/common';
import type { LockError } from './lock.error.js';

/**
 * Thrown by a `@SingleFlight` call with `onRedisError: 'throw'` when Redis could not be asked (an
 * error, a timeout, or the circuit breaker is open). It is a Nest `ServiceUnavailableException`, so
 * an HTTP handler answers 503 with the catalog's `redis_unavailable` text; the Redis error itself
 * (never sent to the client) is `cause`, a `LockError` whose `code` says what failed.
 *
 * @example
 * ```ts
 * try {
 *   await reports.build('daily');
 * } catch (e) {
 *   if (e instanceof RedisUnavailableError) logger.warn(e.cause.message);
 * }
 * ```
 */
export class RedisUnavailableError extends ServiceUnavailableException {
  override readonly name = 'RedisUnavailableError';
  readonly code = 'redis_unavailable';
  declare readonly cause: LockError;

  constructor(
    message: string,
    cause: LockError,
    readonly cacheKey: string,
  ) {
    super({ statusCode: 503, code: 'redis_unavailable', message }, { cause });
  }
}
