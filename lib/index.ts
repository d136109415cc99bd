export { BUFFER_LOCK_OPTIONS, BUFFER_LOCK_WAIT_STRATEGY } from './buffer-lock.constants.js';
export {
  BUFFER_LOCK_ASYNC_OPTIONS_TYPE,
  BUFFER_LOCK_OPTIONS_TYPE,
  type BufferLockModuleExtras,
} from './buffer-lock.module-definition.js';
export { BufferLockModule } from './buffer-lock.module.js';
export { InjectBufferLockOptions } from './decorators/inject-buffer-lock-options.decorator.js';
export { SingleFlight, type SingleFlightKey } from './decorators/single-flight.decorator.js';
export { BufferLockNotImportedError } from './errors/buffer-lock-not-imported.error.js';
export { LockBusyError } from './errors/lock-busy.error.js';
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
  BUFFER_LOCK_DEFAULTS,
  BufferLockOptionsDto,
  ON_BUSY_MODES,
  resolveBufferLockOptions,
  resolveSingleFlightOptions,
  SingleFlightOptionsDto,
  type BufferLockOptions,
  type OnBusy,
  type RedisConnection,
  type ResolvedBufferLockOptions,
  type SingleFlightOptions,
} from './options/buffer-lock.options.js';
export { POLL_INTERVAL_MS, PollingWaitStrategy } from './single-flight/polling-wait.strategy.js';
export {
  SingleFlightEngine,
  type Admission,
  type SingleFlightEngineOptions,
  type SingleFlightLock,
  type SingleFlightSettings,
} from './single-flight/single-flight.engine.js';
export type { WaitStrategy } from './single-flight/wait-strategy.js';
export {
  RedisLockService,
  type AcquireResult,
  type ExtendResult,
  type LockGuard,
  type ReleaseResult,
} from './redis-lock.service.js';
