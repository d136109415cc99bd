import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { CacheOptionsDto, type BufferCacheOptions } from '../options/cache.options.js';
import { readableCopy, validateOptions } from '../options/validate-options.js';

/**
 * The tags of a decorated method's entry: an array, or a function of the method's arguments (with
 * `this` the instance) that returns one.
 *
 * @example
 * ```ts
 * const tags: CacheTagList<ReportsController, [string]> = (id) => ['reports', `report:${id}`];
 * ```
 */
export type CacheTagList<This = unknown, Args extends unknown[] = never[]> =
  readonly string[] | ((this: This, ...args: Args) => readonly string[]);

/** A decorator's cache options, whose `tags` may be a function of the method's arguments. */
export type DecoratedCacheOptions<This, Args extends unknown[]> = Omit<
  BufferCacheOptions,
  'tags'
> & { tags?: CacheTagList<This, Args> };

/**
 * Validates a decorator's options, and gives those of one call as `BufferCache` takes them: the
 * same object each call unless the tags are a function (its answer is checked by the cache).
 */
export function callOptions<This, Args extends unknown[]>(
  options: DecoratedCacheOptions<This, Args>,
  messages: BufferLockMessages,
): (self: This, args: Args) => BufferCacheOptions {
  // Read once: an option whose getter throws is reported by validation, not thrown here.
  const { tags, ...rest } = readableCopy(options);
  if (typeof tags !== 'function') {
    validateOptions(CacheOptionsDto, options, messages, 'partial');
    const fixed = options as BufferCacheOptions;
    return () => fixed;
  }
  validateOptions(CacheOptionsDto, rest, messages, 'partial');
  const call = tags as (this: This, ...args: Args) => readonly string[];
  return (self, args) => ({ ...rest, tags: call.apply(self, args) });
}
