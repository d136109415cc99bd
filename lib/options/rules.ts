/** Shape tests shared by the options declarations. */

/**
 * An object literal (or one made with `Object.create(null)`), not an instance of a class.
 *
 * @example
 * ```ts
 * isPlainObject({ ttl: 30 }); // true
 * isPlainObject(new Map()); // false
 * ```
 */
export const isPlainObject = (value: unknown): value is Record<string, unknown> => {
  try {
    return (
      typeof value === 'object' &&
      value !== null &&
      [Object.prototype, null].includes(Object.getPrototypeOf(value))
    );
  } catch {
    // A Proxy whose getPrototypeOf trap throws.
    return false;
  }
};

/**
 * True for the URL forms ioredis reads: redis://, rediss://, or a Unix socket path.
 *
 * @example
 * ```ts
 * isRedisUrl('rediss://cache:6380'); // true
 * isRedisUrl('/tmp/redis.sock'); // true
 * isRedisUrl('memory://'); // false
 * ```
 */
export const isRedisUrl = (value: unknown): value is string =>
  typeof value === 'string' && /^(rediss?:\/\/|\/)/.test(value);

/**
 * A string with at least one character.
 *
 * @example
 * ```ts
 * isNonEmptyString('en'); // true
 * isNonEmptyString(''); // false
 * ```
 */
export const isNonEmptyString = (value: unknown): value is string =>
  typeof value === 'string' && value !== '';

/**
 * An object with every one of `methods`.
 *
 * @example
 * ```ts
 * @Rule('logger_invalid', hasMethods('log', 'warn', 'error'))
 * logger: LoggerService = new Logger('BufferLock');
 * ```
 */
export const hasMethods =
  (...methods: string[]) =>
  (value: unknown): boolean =>
    typeof value === 'object' &&
    value !== null &&
    methods.every((method) => typeof (value as Record<string, unknown>)[method] === 'function');

/**
 * A cache the library can store entries in: a cache-manager `Cache` (`get`, `set`, `del`), or a
 * Keyv instance or any object with `get`, `set` and `delete`.
 *
 * @example
 * ```ts
 * isCacheStore(new Map()); // true: get, set and delete
 * isCacheStore({ get() {}, set() {} }); // false
 * ```
 */
export const isCacheStore = (value: unknown): boolean =>
  hasMethods('get', 'set', 'del')(value) || hasMethods('get', 'set', 'delete')(value);

/**
 * For `@ValidateIf`: true when the option is given, so that an option left out is not validated.
 *
 * @example
 * ```ts
 * @ValidateIf(given) // maxHold is validated only when it is given
 * @Seconds('max_hold_invalid')
 * maxHold?: number = undefined;
 * ```
 */
export const given = (_options: object, value: unknown): boolean => value !== undefined;
