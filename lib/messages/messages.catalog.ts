/**
 * Every text the library emits, by message id. UPPERCASE words (`ERROR`, `KEY`) are placeholders
 * filled in when the message is rendered.
 *
 * @example
 * ```ts
 * ENGLISH_MESSAGES.redis_lock_failed; // 'Redis lock failed: ERROR'
 * ```
 */
export const ENGLISH_MESSAGES = {
  redis_client_invalid:
    'cache_lock redis must be an object with an eval() method or a code reference returning one',
  redis_namespace_invalid: 'cache_lock namespace must be a non-empty string',
  redis_ttl_invalid: 'cache_lock ttl must be a positive number of seconds',
  redis_messages_invalid: 'cache_lock messages must be an object of texts keyed by message id',
  redis_fencing_invalid: 'cache_lock fencing must be true or false',
  redis_connect_timeout_invalid: 'cache_lock connectTimeout must be a positive number of seconds',
  option_unknown: 'cache_lock NAME is not an option here; check its spelling',
  lock_key_undefined: 'cache key is not defined',
  lock_key_invalid: 'cache key must be a string',
  redis_lock_failed: 'Redis lock failed: ERROR',
  redis_no_client: 'Redis client factory returned no client',
  redis_no_result: 'Redis lock command returned no result',
  redis_bad_reply: 'Redis lock command returned an unexpected reply',
  redis_connect_timeout: 'Redis client factory gave no client within SECONDS s',
  redis_client_missing:
    'ioredis is not installed: install ioredis to connect by a redis:// URL or ioredis options, or pass a client (ioredis, iovalkey, node-redis) or a factory returning one',
  redis_unreachable: 'Redis at WHERE could not be reached: WHY',
  redis_refused: 'the connection was refused',
  redis_auth_failed: 'authentication failed; check the password and the user',
  redis_timed_out: 'it did not answer in time',
  redis_host_unknown: 'its host name is not known',
  redis_unreachable_at_boot:
    'Redis could not be reached at startup: ERROR. Calls go on as onRedisError says until it answers',
  redis_invalid_guard: 'invalid lock guard',
  redis_unlock_failed: 'Redis unlock failed: ERROR',
  redis_extend_failed: 'Redis lock extend failed: ERROR',
  shared_result_unserializable:
    'The result for KEY cannot be shared between workers: WHAT at PATH cannot be serialized. Return plain data, pass a serializer, or set share: false',
  shared_result_unreadable: 'The shared result for KEY could not be read: ERROR',
  shared_result_failed: 'Redis shared result failed: ERROR',
  lock_lost: 'The lock on KEY was lost (REASON); the work is no longer exclusive',
  module_redis_invalid:
    'cache_lock redis must be a client with an eval() method, a function returning one, a redis:// URL or an ioredis options object',
  lock_timeout_invalid: 'cache_lock lockTimeout must be a positive number of seconds',
  lock_timeout_not_below_ttl: 'cache_lock lockTimeout must be shorter than ttl',
  option_values: 'TEXT (VALUES)',
  option_value: 'NAME: VALUE',
  option_value_default: 'NAME: VALUE, the default',
  option_not_given: 'NAME: not given',
  on_busy_invalid: "cache_lock onBusy must be 'wait', 'skip' or 'throw'",
  locale_invalid: 'cache_lock locale must be a non-empty string',
  catalogs_invalid: 'cache_lock catalogs must be an object of message catalogs keyed by locale',
  logger_invalid: 'cache_lock logger must have log(), warn() and error() methods',
  log_interval_invalid: 'cache_lock logInterval must be a positive number of seconds',
  share_invalid: 'cache_lock share must be true or false',
  on_redis_error_invalid: "cache_lock onRedisError must be 'proceed' or 'throw'",
  max_hold_invalid: 'cache_lock maxHold must be a positive number of seconds',
  serializer_invalid:
    'cache_lock serializer must be an object with serialize() and deserialize() methods',
  on_lock_lost_invalid: 'cache_lock onLockLost must be a function',
  circuit_breaker_invalid:
    'cache_lock circuitBreaker must be false or an object with failureThreshold, openSeconds and probes',
  breaker_failures_invalid: 'cache_lock circuitBreaker.failureThreshold must be a positive integer',
  breaker_open_seconds_invalid:
    'cache_lock circuitBreaker.openSeconds must be a positive number of seconds',
  breaker_probes_invalid: 'cache_lock circuitBreaker.probes must be a positive integer',
  trace_keys_invalid: 'cache_lock traceKeys must be true or false',
  single_flight_key_invalid:
    '@SingleFlight key must be a non-empty string or a function that returns the cache key',
  single_flight_not_method: '@SingleFlight can only decorate a method',
  single_flight_options_invalid:
    '@SingleFlight options must be an object of the per-method settings (ttl, lockTimeout, onBusy, share, onRedisError, maxHold)',
  single_flight_no_module:
    'CLASS.METHOD uses @SingleFlight, but BufferLockModule is not visible to its module: import BufferLockModule.forRoot() there, or register it with isGlobal: true',
  lock_busy: 'This entry is being built by another worker; try again shortly',
  single_flight_share_response:
    '@SingleFlight on CLASS.METHOD has share: true, but WHAT: its result cannot be shared between workers. Return plain data, or set share: false',
  redis_unavailable: 'The lock service is unavailable; try again shortly',
  lock_fail_open: 'ERROR; running KEY without a cross-worker lock',
  lock_wait_timeout: 'Waited SECONDS s for the lock on KEY; running without it',
  lock_breaker_open:
    'Redis circuit breaker open after FAILURES consecutive failures; skipping Redis for SECONDS s',
  lock_breaker_closed: 'Redis answers again; circuit breaker closed',
  lock_breaker_skip: 'Redis circuit breaker is open; running KEY without a cross-worker lock',
  subscriber_failed:
    'Redis wake-up subscription failed: ERROR; waiting callers poll until it works again',
  log_suppressed: 'LINE (COUNT more like this in the last SECONDS s)',
  cache_store_invalid:
    'cache_lock cache must be a cache-manager Cache, a Keyv instance or an object with get(), set() and delete()',
  cache_prefix_invalid: 'cache_lock cachePrefix must be a string without { or }',
  store_timeout_invalid: 'cache_lock storeTimeout must be a positive number of seconds',
  cache_defaults_invalid:
    'cache_lock cacheDefaults must be an object of cache settings (ttl, grace, timeout, lockTtl, lockTimeout, hardTimeout, maxValueBytes, earlyRefresh, l1)',
  cache_ttl_invalid: 'cache_lock cache ttl must be a positive number of seconds',
  cache_grace_invalid: 'cache_lock cache grace must be zero or a positive number of seconds',
  cache_timeout_invalid: 'cache_lock cache timeout must be zero or a positive number of seconds',
  cache_stale_if_error_invalid:
    'cache_lock cache staleIfError must be zero or a positive number of seconds, 604800 (7 days) at most',
  cache_lock_ttl_invalid: 'cache_lock cache lockTtl must be a positive number of seconds',
  cache_lock_timeout_invalid: 'cache_lock cache lockTimeout must be a positive number of seconds',
  cache_hard_timeout_invalid: 'cache_lock cache hardTimeout must be a positive number of seconds',
  cache_max_value_bytes_invalid:
    'cache_lock cache maxValueBytes must be a positive whole number of bytes',
  cache_early_refresh_invalid:
    'cache_lock cache earlyRefresh must be true, false or a positive number',
  cache_put_key_invalid:
    '@CachePut key must be a non-empty string or a function that returns the cache key',
  cache_put_not_method: '@CachePut can only decorate a method',
  cache_put_options_invalid:
    '@CachePut options must be an object of cache settings (ttl, grace, timeout, lockTtl, lockTimeout, hardTimeout, maxValueBytes, earlyRefresh, l1)',
  cache_put_unsupported:
    '@CachePut on CLASS.METHOD cannot store its result as one entry: WHAT. Return plain data',
  cache_put_no_module:
    'CLASS.METHOD uses @CachePut, but BufferLockModule is not visible to its module: import BufferLockModule.forRoot() there, or register it with isGlobal: true',
  cache_evict_key_invalid:
    '@CacheEvict keys must be a non-empty string, an array of them, or a function that returns them',
  cache_evict_not_method: '@CacheEvict can only decorate a method',
  cache_evict_options_invalid: '@CacheEvict options must be an object of settings (tags)',
  cache_evict_no_module:
    'CLASS.METHOD uses @CacheEvict, but BufferLockModule is not visible to its module: import BufferLockModule.forRoot() there, or register it with isGlobal: true',
  cache_tags_invalid: 'cache_lock cache tags must be an array of non-empty strings',
  cache_delete_by_tag_failed:
    'Deleting cache entries by tag failed: ERROR; the entries that carry it are still served',
  cache_l1_invalid: 'cache_lock cache l1 must be true or false',
  l1_invalid: 'cache_lock l1 must be false or an object with maxEntries and maxAge',
  l1_max_entries_invalid: 'cache_lock l1.maxEntries must be a positive integer',
  l1_max_age_invalid: 'cache_lock l1.maxAge must be a positive number of seconds',
  write_replicas_invalid:
    'cache_lock writeReplicas must be false or an object with replicas and timeout',
  write_replicas_count_invalid: 'cache_lock writeReplicas.replicas must be a positive integer',
  write_replicas_timeout_invalid:
    'cache_lock writeReplicas.timeout must be a positive number of seconds',
  cache_write_unreplicated: 'only ACKED of REPLICAS replicas had it after SECONDS s',
  cache_replicas_unsupported: 'the Redis client cannot wait for replicas',
  l1_publish_failed:
    'Could not tell the other workers to drop their copy of a cache entry: ERROR; they serve it for SECONDS s at most',
  idempotent_options_invalid:
    '@Idempotent options must be an object of settings (header, key, required, expiresAfter, onBusy, ttl, lockTimeout, scope, storeErrors)',
  idempotent_header_invalid: '@Idempotent header must be an HTTP header name',
  idempotent_required_invalid: '@Idempotent required must be true or false',
  idempotent_expires_after_invalid: '@Idempotent expiresAfter must be a positive number of seconds',
  idempotent_on_busy_invalid: "@Idempotent onBusy must be 'throw' or 'wait'",
  idempotent_key_invalid:
    '@Idempotent key must be a function of the request or message context that returns the key',
  idempotent_scope_invalid:
    '@Idempotent scope must be a function of the request context that returns a string',
  idempotent_store_errors_invalid: '@Idempotent storeErrors must be true or false',
  idempotent_context_unsupported:
    '@Idempotent on CLASS.METHOD works on HTTP routes and message handlers, not in a TYPE context',
  idempotency_key_missing: 'This request needs an HEADER header',
  idempotency_key_invalid: 'The HEADER header must hold 1 to 255 characters',
  idempotency_key_reused:
    'This HEADER was used for another request; send a new key for a new request',
  idempotency_in_progress: 'A request with this HEADER is still being processed; try again shortly',
  idempotency_message_key_missing:
    '@Idempotent on CLASS.METHOD found no key for this message: its key option must be a function that reads one from the message',
  idempotency_message_key_invalid:
    '@Idempotent on CLASS.METHOD needs a key of 1 to 255 characters from its key function',
  idempotency_message_key_reused:
    'This key of CLASS.METHOD was used for another message; a new message needs a new key',
  idempotency_message_in_progress:
    'A message with this key is still being processed by CLASS.METHOD; try again shortly',
  idempotency_unavailable: 'Idempotency keys cannot be checked now; try again shortly',
  idempotency_store_failed:
    'An idempotency record could not be read or kept: ERROR; a retry with its key runs again if it was not kept',
  cache_interceptor_failed: 'The cache failed for a route, whose handler answered instead: ERROR',
  cache_invalidation_failed:
    'Deleting the cached responses of URL after a write to it failed: ERROR; they are served until they expire',
  http_invalid:
    'cache_lock http must be an object with shareAuthorized, vary, maxTtl and requireFreshness',
  http_authorized_invalid: 'cache_lock http.shareAuthorized must be true or false',
  http_vary_invalid: 'cache_lock http.vary must be an array of request header names',
  http_max_ttl_invalid: 'cache_lock http.maxTtl must be a positive number of seconds',
  http_freshness_invalid: 'cache_lock http.requireFreshness must be true or false',
  cached_key_invalid:
    '@Cached key must be a non-empty string or a function that returns the cache key',
  cached_not_method: '@Cached can only decorate a method',
  cached_options_invalid:
    '@Cached options must be an object of cache settings (ttl, grace, timeout, lockTtl, lockTimeout, hardTimeout, maxValueBytes, earlyRefresh, l1)',
  cached_unsupported:
    '@Cached on CLASS.METHOD cannot cache its result as one entry: WHAT. Return plain data',
  cached_no_module:
    'CLASS.METHOD uses @Cached, but BufferLockModule is not visible to its module: import BufferLockModule.forRoot() there, or register it with isGlobal: true',
  cache_value_unserializable:
    'The value for KEY cannot be cached: WHAT at PATH cannot be serialized. Return plain data, or pass a serializer',
  cache_value_too_large:
    'The value for KEY is BYTES bytes encoded, more than maxValueBytes (MAX): it was not cached',
  cache_build_timeout:
    'Building the value for KEY took more than SECONDS s (hardTimeout): its lock is released, and a late value is not stored',
  cache_store_failed: 'The cache store failed: ERROR; serving without it',
  cache_store_timeout: 'the cache store did not answer within SECONDS s (storeTimeout)',
  cache_write_failed:
    'The cache store could not write or delete an entry: ERROR; the entry it held may still be served',
  cache_entry_unreadable: 'A cache entry could not be read: ERROR; building it anew',
  cache_refresh_failed:
    'Refreshing a stale cache entry failed: ERROR; serving it stale, next try in SECONDS s',
  cache_rebuild_backing_off:
    'Rebuilding KEY failed in another worker, which tries again in SECONDS s; its expired entry is gone',
  health_timeout_invalid:
    'BufferLockHealthIndicator timeout must be a positive number of milliseconds',
  health_ping_timeout: 'Redis did not answer PING within MS ms',
  health_ping_failed: 'Redis PING failed: ERROR',
  health_ping_bad_reply: 'Redis answered PING with an unexpected reply',
  health_breaker_open: 'Redis circuit breaker is open',
  memory_backend:
    'In-memory backend (memory://): locks, waits, shared results and cached entries coordinate this process only, not other processes or hosts; give a redis:// URL to coordinate several',
  shutdown_timeout_invalid: 'cache_lock shutdownTimeout must be 0 or a positive number of seconds',
  lock_closed: 'The lock is shutting down: no new lock is taken',
  shutdown_abandoned:
    'COUNT builds still ran after shutdownTimeout (SECONDS s): their locks were released, and their results are not shared',
} as const;

/**
 * The id of one message in the catalog.
 *
 * @example
 * ```ts
 * const id: MessageId = 'redis_ttl_invalid';
 * ```
 */
export type MessageId = keyof typeof ENGLISH_MESSAGES;

export const MESSAGE_IDS: readonly MessageId[] = Object.keys(ENGLISH_MESSAGES) as MessageId[];
