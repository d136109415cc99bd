// The public API, and nothing else: each name is a promise to users. test/index.spec.ts pins it.
export { BufferLockModule } from './buffer-lock.module.js';
export { BufferCacheInterceptor } from './cache/buffer-cache.interceptor.js';
export { BufferCache } from './cache/buffer-cache.service.js';
export { Cached } from './decorators/cached.decorator.js';
export { CacheEvict, type CacheEvictKeys } from './decorators/cache-evict.decorator.js';
export { CachePut } from './decorators/cache-put.decorator.js';
export { CacheTags } from './decorators/cache-tags.decorator.js';
export type { CacheTagList } from './decorators/decorated-tags.js';
export type { BufferCacheOptions } from './options/cache.options.js';
export type { BufferCacheStore } from './cache/cache-store.js';
export { InjectBufferLockOptions } from './decorators/inject-buffer-lock-options.decorator.js';
export type { BufferLockDecorator, SingleFlightKey } from './decorators/method-metadata.js';
export { Idempotent } from './decorators/idempotent.decorator.js';
export type { IdempotentOptions } from './options/idempotent.options.js';
export { SingleFlight } from './decorators/single-flight.decorator.js';
export { BufferLockNotImportedError } from './errors/buffer-lock-not-imported.error.js';
export { LockBusyError } from './errors/lock-busy.error.js';
export { RedisUnavailableError } from './errors/redis-unavailable.error.js';
export { BufferLockConfigError, LockError } from './errors/lock.error.js';
export type { AcquireResult, ExtendResult, LockGuard, ReleaseResult } from './lock/lock-results.js';
export { RedisLockService } from './lock/redis-lock.service.js';
export { BufferLockMessages } from './messages/buffer-lock-messages.js';
export { ENGLISH_MESSAGES, type MessageId } from './messages/messages.catalog.js';
export type {
  BufferLockOptions,
  ResolvedBufferLockOptions,
} from './options/buffer-lock.options.js';
export type { SingleFlightOptions } from './options/single-flight.options.js';
export type { SecondsOption, SecondsResolved } from './options/seconds.js';
export type { RedisLockOptions } from './options/redis-lock.options.js';
export type { LockClient, RedisClientFactory } from './redis/client.js';
export type { RedisScriptClient } from './types/clients.js';
export { connectFailFast } from './redis/client-defaults.js';
export type { ResultSerializer } from './serialization/result-serializer.js';
export type { BufferLockTypes, Stored } from './serialization/stored.js';
export { SingleFlightEngine } from './single-flight/single-flight.engine.js';
export type { BufferCacheEvents, FlightLockLostEvent, SingleFlightEvents } from './types/events.js';
