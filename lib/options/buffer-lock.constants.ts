// Injection tokens internal to the library: users inject the options with
// `@InjectBufferLockOptions()`, and tests replace the wait strategy through the module's
// `overrides`.

/**
 * The validated module options (defaults applied).
 *
 * @example
 * ```ts
 * constructor(@Inject(BUFFER_LOCK_OPTIONS) options: ResolvedBufferLockOptions) {}
 * ```
 */
export const BUFFER_LOCK_OPTIONS: unique symbol = Symbol('BUFFER_LOCK_OPTIONS');

/**
 * The `WaitStrategy` that waiting `@SingleFlight` callers use (wake on release by default).
 *
 * @example
 * ```ts
 * BufferLockModule.forRoot({
 *   redis: 'memory://',
 *   overrides: [{ provide: BUFFER_LOCK_WAIT_STRATEGY, useValue: new PollingWaitStrategy(20) }],
 * });
 * ```
 */
export const BUFFER_LOCK_WAIT_STRATEGY: unique symbol = Symbol('BUFFER_LOCK_WAIT_STRATEGY');
