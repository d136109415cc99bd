import type { Observable } from 'rxjs';
import { PUT } from '../cache/buffer-cache.service.js';
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
import { onSuccess } from './on-success.js';

/**
 * Runs the method on every call and stores its value as the fresh entry of `key` (with no lock),
 * as `BufferCache.set` does: every worker's `l1` copy of it is dropped. Resolves to the value as
 * a hit will return it; a method that throws stores nothing. The method becomes async. An
 * Observable (declared or not) stays one: each subscription stores its last value once it
 * completes, and hands that value on as a hit will return it (the others go on one behind); one
 * that errors, or completes with no value, stores nothing. A handler that answers through
 * `@Res()`/`@Next()` is refused when the class is defined.
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
): BufferLockDecorator<Args, Promise<unknown> | Observable<unknown>, false, true> {
  const messages = new BufferLockMessages();
  checkArguments(messages, 'cache_put', key, options);
  const optionsOf = callOptions(options, messages);

  return cacheMethod<This, Args>(messages, 'cache_put', (cache, self, args, original, observable) =>
    onSuccess(
      () => original.apply(self, args),
      async (last) => last && cache[PUT](keyOf(key, self, args), last.value, optionsOf(self, args)),
      observable,
    ),
  );
}
