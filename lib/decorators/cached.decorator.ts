import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { BufferCacheOptions } from '../options/cache.options.js';
import { cacheMethod } from './cache-method.js';
import { callOptions, type CacheTagList } from './decorated-tags.js';
import {
  checkArguments,
  keyOf,
  type BufferLockDecorator,
  type SingleFlightKey,
} from './method-metadata.js';

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
): BufferLockDecorator<Args, Promise<unknown>, false, true> {
  const messages = new BufferLockMessages();
  checkArguments(messages, 'cached', key, options);
  const optionsOf = callOptions(options, messages);

  return cacheMethod<This, Args>(messages, 'cached', (cache, self, args, original) =>
    cache.getOrSet(keyOf(key, self, args), () => original.apply(self, args), optionsOf(self, args)),
  );
}
