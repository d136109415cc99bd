import { BufferLockNotImportedError } from '../errors/buffer-lock-not-imported.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { validateOptions } from '../options/validate-options.js';
import {
  configError,
  injectOnce,
  isKeyForm,
  isOptionsForm,
  keyOf,
  originalMethod,
  type KeyedMethodDecorator,
  notAPlainValue,
  replaceMethod,
  returnsObservable,
  type SingleFlightKey,
} from './method-metadata.js';
import { BufferCache } from '../cache/buffer-cache.service.js';
import { CacheOptionsDto, type BufferCacheOptions } from '../options/cache.options.js';

/** The instance property Nest fills with the cache (property injection, per instance). */
const CACHE: unique symbol = Symbol('BufferLock.cache');

/**
 * Caches the method's value under `key`, built once across every worker sharing one Redis: a
 * fresh hit is one store read and no lock; a miss runs the method in one worker while the others
 * wait and take its value; with `grace`, a stale value is served while one worker refreshes it.
 * The method becomes async. Works on controller handlers and provider methods, next to `@Get`,
 * `@Cron` and the rest in either order. Refused when the class is defined: a handler that answers
 * through `@Res()`/`@Next()`, or a method declared to return an Observable (neither is one value).
 *
 * @example
 * ```ts
 * @Get(':id')
 * @Cached((id: string) => `report:${id}`, { ttl: 60, grace: 600 })
 * report(@Param('id') id: string): Promise<Report> {
 *   return this.reports.build(id); // runs on a miss only, in one worker of the fleet
 * }
 * ```
 */
export function Cached<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  options: BufferCacheOptions = {},
): KeyedMethodDecorator {
  const messages = new BufferLockMessages();
  if (!isKeyForm(key)) throw configError(messages, 'key', 'cached_key_invalid');
  if (!isOptionsForm(options)) throw configError(messages, 'options', 'cached_options_invalid');
  // Validated once, here; the cache keeps what it resolves for this very object.
  validateOptions(CacheOptionsDto, options, messages, 'partial');

  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'cached_not_method',
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    const why = returnsObservable(target, propertyKey)
      ? 'it returns an Observable'
      : notAPlainValue(target, propertyKey);
    if (why) throw configError(messages, 'method', 'cached_unsupported', { ...names, WHAT: why });
    injectOnce(target, CACHE, BufferCache);

    const wrapper = function (this: This, ...args: Args): Promise<unknown> {
      const cache = (this as { [CACHE]?: BufferCache })[CACHE];
      if (!cache) {
        return Promise.reject(
          new BufferLockNotImportedError(messages.render('cached_no_module', names)),
        );
      }
      try {
        return cache.getOrSet(keyOf(key, this, args), () => original.apply(this, args), options);
      } catch (error) {
        return Promise.reject(error);
      }
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
