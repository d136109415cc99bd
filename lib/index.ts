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
export { RedisUnavailableError } from './errors/redis-unavailable.error.js';
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
  ON_REDIS_ERROR_MODES,
  resolveBufferLockOptions,
  resolveSingleFlightOptions,
  SingleFlightOptionsDto,
  type BufferLockOptions,
  type CircuitBreakerSettings,
  type OnBusy,
  type OnRedisError,
  type RedisConnection,
  type ResolvedBufferLockOptions,
  type SingleFlightOptions,
} from './options/buffer-lock.options.js';
export { POLL_INTERVAL_MS, PollingWaitStrategy } from './single-flight/polling-wait.strategy.js';
export {
  SingleFlightEngine,
  type Admission,
  type FlightLockLostEvent,
  type SingleFlightEngineOptions,
  type SingleFlightEvents,
  type SingleFlightLock,
  type SingleFlightSettings,
} from './single-flight/single-flight.engine.js';
export type { WaitStrategy } from './single-flight/wait-strategy.js';
export { currentFlight, type FlightContext } from './single-flight/flight-context.js';
export {
  RedisLockService,
  type AcquireResult,
  type ExtendResult,
  type LockGuard,
  type ReleaseResult,
} from './redis-lock.service.js';
export {
  CLUSTER_SLOTS,
  derivedKey,
  fenceKey,
  hashTag,
  keySlot,
  releaseChannel,
  resultKey,
  type LockKeyRole,
} from './redis/keys.js';
export { releaseLock, WAKE_MESSAGE, type ReleaseWrite } from './redis/release-lock.js';
export { connectFailFast, FAIL_FAST_CLIENT_DEFAULTS } from './redis/client-defaults.js';
export {
  SharedResultStore,
  type SharedRead,
  type SharedResultOptions,
  type StoreResult,
} from './redis/shared-result.js';
export {
  findUnserializable,
  JSON_RESULT_SERIALIZER,
  UnserializableValueError,
  type ResultSerializer,
  type Unserializable,
} from './serialization/result-serializer.js';
export {
  CIRCUIT_BREAKER_DEFAULTS,
  CircuitBreaker,
  type CircuitBreakerOptions,
  type CircuitState,
} from './single-flight/circuit-breaker.js';
export {
  PubSubWaitStrategy,
  type PubSubWaitOptions,
} from './single-flight/pubsub-wait.strategy.js';
export {
  ReleaseSubscriber,
  releaseSubscriberFor,
  type DuplicableClient,
  type Listening,
  type ReleaseSubscriberOptions,
  type SubscriberConnection,
} from './single-flight/release-subscriber.js';
export {
  LockWatchdog,
  type LockExtender,
  type LockLostEvent,
  type LockLostReason,
  type WatchdogOptions,
} from './single-flight/watchdog.js';
