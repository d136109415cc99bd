import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { callOptions, type CacheTagList } from './decorated-tags.js';
import type { BufferCacheOptions } from '../options/cache.options.js';
import type { SingleFlight } from './single-flight.decorator.js';
import {
  checkArguments,
  configError,
  keyOf,
  notAPlainValue,
  originalMethod,
  replaceMethod,
  returnsObservable,
  type SingleFlightKey,
} from './method-metadata.js';
import { cacheOf, injectCache } from './injected-cache.js';

/**
 * Caches the method's value under `key`, built once across every worker sharing one Redis (see
 * `BufferCache.getOrSet`). The method becomes async. Refused when the class is defined for a
 * handler that answers through `@Res()`/`@Next()` or returns an Observable.
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
  options: Omit<BufferCacheOptions, 'tags'> & { tags?: CacheTagList<This, Args> } = {},
): ReturnType<typeof SingleFlight> {
  const messages = new BufferLockMessages();
  checkArguments(messages, 'cached', key, options);
  const optionsOf = callOptions(options, messages);

  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'cached',
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    const why = returnsObservable(target, propertyKey)
      ? 'it returns an Observable'
      : notAPlainValue(target, propertyKey);
    if (why) throw configError(messages, 'method', 'cached_unsupported', { ...names, WHAT: why });
    injectCache(target);

    const wrapper = function (this: This, ...args: Args): Promise<unknown> {
      const cache = cacheOf(this, messages, 'cached_no_module', names);
      if (cache instanceof Error) return Promise.reject(cache);
      try {
        const own = optionsOf(this, args);
        return cache.getOrSet(keyOf(key, this, args), () => original.apply(this, args), own);
      } catch (error) {
        return Promise.reject(error);
      }
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
