/**
 * The injection token of the validated module options (defaults applied). Inject it, or use
 * `@InjectBufferLockOptions()`, to read the options the module runs with.
 *
 * @example
 * ```ts
 * constructor(@Inject(BUFFER_LOCK_OPTIONS) private readonly options: ResolvedBufferLockOptions) {}
 * ```
 */
export const BUFFER_LOCK_OPTIONS: unique symbol = Symbol('BUFFER_LOCK_OPTIONS');

/**
 * The injection token of the `WaitStrategy` that waiting `@SingleFlight` callers use. The module
 * provides a `PubSubWaitStrategy` (wake on release, PTTL backstop); replace it through the
 * module's `overrides`, e.g. with a `PollingWaitStrategy` for a Redis without sharded pub/sub.
 *
 * @example
 * ```ts
 * BufferLockModule.forRoot({
 *   redis: () => new Redis(),
 *   overrides: [{ provide: BUFFER_LOCK_WAIT_STRATEGY, useValue: new PollingWaitStrategy(20) }],
 * });
 * ```
 */
export const BUFFER_LOCK_WAIT_STRATEGY: unique symbol = Symbol('BUFFER_LOCK_WAIT_STRATEGY');
