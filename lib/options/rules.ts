// Shape tests shared by the options declarations.
import { attempt } from '../messages/error-text.js';

/** An object literal (or `Object.create(null)`), not an instance of a class. */
export const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' &&
  value !== null &&
  attempt(() => [Object.prototype, null].includes(Object.getPrototypeOf(value)), false);

/** The URL forms ioredis reads: redis://, rediss://, or a Unix socket path. */
export const isRedisUrl = (value: unknown): value is string =>
  typeof value === 'string' && /^(rediss?:\/\/|\/)/.test(value);

export const isNonEmptyString = (value: unknown): value is string =>
  typeof value === 'string' && value !== '';

export const hasMethods =
  (...methods: string[]) =>
  (value: unknown): boolean =>
    typeof value === 'object' &&
    value !== null &&
    methods.every((method) => typeof (value as Record<string, unknown>)[method] === 'function');

/** A cache-manager `Cache` (`del`), or a Keyv instance or a Map-like store (`delete`). */
export const isCacheStore = (value: unknown): boolean =>
  hasMethods('get', 'set', 'del')(value) || hasMethods('get', 'set', 'delete')(value);

/** For `@ValidateIf`: an option left out is not validated. */
export const given = (_options: object, value: unknown): boolean => value !== undefined;
