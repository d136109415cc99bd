import { PUT } from '../cache/buffer-cache.service.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { BufferCacheOptions } from '../options/cache.options.js';
import { cacheMethod } from './cache-method.js';
import { callOptions, type CacheTagList } from './decorated-tags.js';
import { checkArguments, keyOf, type SingleFlightKey } from './method-metadata.js';
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

  return cacheMethod<This, Args>(messages, 'cache_put', async (cache, self, args, original) => {
    const value = await original.apply(self, args);
    return cache[PUT](keyOf(key, self, args), value, optionsOf(self, args));
  });
}
