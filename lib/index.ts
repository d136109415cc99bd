export { BUFFER_LOCK_OPTIONS } from './buffer-lock.constants.js';
export { BufferLockConfigError, LockError, type ConfigViolation } from './errors/lock.error.js';
export { BufferLockMessages, type MessageSettings } from './messages/buffer-lock-messages.js';
export {
  ENGLISH_MESSAGES,
  MESSAGE_IDS,
  type MessageCatalog,
  type MessageId,
  type MessageParams,
} from './messages/messages.catalog.js';
export {
  LOCK_DEFAULTS,
  RedisLockOptionsDto,
  resolveLockOptions,
  type RedisClientFactory,
  type RedisLockOptions,
  type RedisScriptClient,
  type ResolvedLockOptions,
} from './options/redis-lock.options.js';
export { parseSeconds, toMilliseconds } from './options/seconds.js';
export {
  RedisLockService,
  type AcquireResult,
  type ExtendResult,
  type LockGuard,
  type ReleaseResult,
} from './redis-lock.service.js';
