import { keyHashOf, type LockLostMessage } from '../telemetry/channels.js';
import type { FlightLockLostEvent } from '../types/events.js';

/**
 * What the lost-lock channel publishes for `event`: the key's hash, the key only with
 * `traceKeys`.
 *
 * @example
 * ```ts
 * if (lockLostChannel.hasSubscribers) lockLostChannel.publish(lockLostMessage(event, false));
 * ```
 */
export function lockLostMessage(event: FlightLockLostEvent, traceKeys: boolean): LockLostMessage {
  const keyHash = keyHashOf(event.key);
  return traceKeys
    ? { keyHash, key: event.cacheKey, reason: event.reason }
    : { keyHash, reason: event.reason };
}
