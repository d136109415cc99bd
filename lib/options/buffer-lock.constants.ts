/**
 * The validated module options (defaults applied); users inject them with
 * `@InjectBufferLockOptions()`.
 */
export const BUFFER_LOCK_OPTIONS: unique symbol = Symbol('BUFFER_LOCK_OPTIONS');
