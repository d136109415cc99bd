import type { RedisLockService } from '../lock/redis-lock.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { FlightOptions } from '../options/buffer-lock.options.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';

/** What the cache's parts share. */
export interface CacheParts {
  readonly lock: RedisLockService;
  readonly options: FlightOptions;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly now: () => number;
}
