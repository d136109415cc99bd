import { ServiceUnavailableException } from '@nestjs/common';
import type { LockError } from './lock.error.js';

/**
 * Thrown by a `@SingleFlight` call with `onRedisError: 'throw'` when Redis could not be asked
 * (an error, a timeout, an open breaker): HTTP 503 with the `redis_unavailable` text. The Redis
 * error, never sent to the client, is `cause`.
 *
 * @example
 * ```ts
 * if (e instanceof RedisUnavailableError) logger.warn(e.cause.message);
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
