/**
 * The injection token of the validated module options (defaults applied). Inject it to read the
 * options the module runs with.
 *
 * @example
 * ```ts
 * constructor(@Inject(BUFFER_LOCK_OPTIONS) private readonly options: BufferLockOptions) {}
 * ```
 */
export const BUFFER_LOCK_OPTIONS: unique symbol = Symbol('BUFFER_LOCK_OPTIONS');
