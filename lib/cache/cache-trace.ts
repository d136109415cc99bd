import { keyHashOf, type CacheTrace } from '../telemetry/channels.js';

/**
 * A lookup's trace on the cache channel: the key's hash, the key only with `traceKeys`.
 *
 * @example
 * ```ts
 * const trace = cacheTraceOf('report:7', lock.redisKey('report:7'), false, 'refresh');
 * ```
 */
export function cacheTraceOf(
  key: string,
  lockKey: string,
  traceKeys: boolean,
  role?: CacheTrace['role'],
): CacheTrace {
  const keyHash = keyHashOf(lockKey);
  return traceKeys ? { keyHash, key, role } : { keyHash, role };
}
