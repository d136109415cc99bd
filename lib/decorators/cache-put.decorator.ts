import { PUT } from '../cache/buffer-cache.service.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { callOptions, type CacheTagList } from './decorated-tags.js';
import type { BufferCacheOptions } from '../options/cache.options.js';
import { cacheOf, injectCache } from './injected-cache.js';
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
import type { SingleFlight } from './single-flight.decorator.js';

/**
 * Runs the method on every call and stores its value as the fresh entry of `key` (with no lock),
 * as `BufferCache.set` does: every worker's `l1` copy of it is dropped. Resolves to the value as
 * a hit will return it; a method that throws stores nothing. The method becomes async; the same
 * handlers as for `@Cached` are refused when the class is defined.
 *
 * @example
 * ```ts
 * @Put(':id')
 * @CachePut((id: string) => `report:${id}`, { ttl: 60 })
 * update(@Param('id') id: string, @Body() body: ReportInput): Promise<Report> {
 *   return this.reports.save(id, body); // the next @Cached read of report:<id> gets this
 * }
 * ```
 */
export function CachePut<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  options: Omit<BufferCacheOptions, 'tags'> & { tags?: CacheTagList<This, Args> } = {},
): ReturnType<typeof SingleFlight> {
  const messages = new BufferLockMessages();
  checkArguments(messages, 'cache_put', key, options);
  const optionsOf = callOptions(options, messages);

  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'cache_put',
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    const why = returnsObservable(target, propertyKey)
      ? 'it returns an Observable'
      : notAPlainValue(target, propertyKey);
    if (why)
      throw configError(messages, 'method', 'cache_put_unsupported', { ...names, WHAT: why });
    injectCache(target);

    const wrapper = async function (this: This, ...args: Args): Promise<unknown> {
      const cache = cacheOf(this, messages, 'cache_put_no_module', names);
      if (cache instanceof Error) throw cache;
      const value = await original.apply(this, args);
      return cache[PUT](keyOf(key, this, args), value, optionsOf(this, args));
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
