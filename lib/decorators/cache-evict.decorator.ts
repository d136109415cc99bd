import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { CacheEvictOptionsDto } from '../options/cache-evict.options.js';
import { isPlainObject } from '../options/rules.js';
import { readableCopy, validateOptions } from '../options/validate-options.js';
import type { CacheTagList } from './decorated-tags.js';
import { cacheOf, injectCache } from './injected-cache.js';
import {
  checkArguments,
  configError,
  originalMethod,
  replaceMethod,
  returnsObservable,
  type BufferLockDecorator,
} from './method-metadata.js';
import { failed, onSuccess } from './on-success.js';

/**
 * The entries `@CacheEvict` deletes: a key, keys (none when its `tags` say what to evict), or a function of the method's arguments (with
 * `this` the instance) that returns them.
 *
 * @example
 * ```ts
 * const keys: CacheEvictKeys<ReportsController, [string]> = (id) => [`report:${id}`, 'reports'];
 * ```
 */
export type CacheEvictKeys<This = unknown, Args extends unknown[] = never[]> =
  string | readonly string[] | ((this: This, ...args: Args) => string | readonly string[]);

/**
 * Deletes the entries of `keys`, and with `tags` every entry carrying one of them (see
 * `BufferCache.deleteByTag`), once the method has returned (or its promise resolved), and only
 * then: a method that throws or rejects deletes nothing. The next call of each key builds it
 * again (once across the fleet), and every worker's `l1` copy is dropped. The method becomes
 * async and resolves to its own value once the entries are gone. An Observable (declared or not)
 * stays one: each subscription deletes once it completes, and its values go on one behind, the
 * last once the entries are gone; one that errors deletes nothing.
 *
 * @example
 * ```ts
 * @Delete(':id')
 * @CacheEvict((id: string) => [`report:${id}`, 'reports:list'])
 * remove(@Param('id') id: string): Promise<void> {
 *   return this.reports.remove(id);
 * }
 * ```
 */
export function CacheEvict<This, Args extends unknown[]>(
  keys: CacheEvictKeys<This, Args>,
  options: { tags?: CacheTagList<This, Args> } = {},
): BufferLockDecorator<Args> {
  const messages = new BufferLockMessages();
  // No keys is fine when tags say what to evict.
  const tagsOnly = Array.isArray(keys) && keys.length === 0 && isPlainObject(options);
  checkArguments(messages, 'cache_evict', tagsOnly ? 'tags' : keys, options);
  if (tagsOnly && readableCopy(options).tags === undefined) {
    throw configError(messages, 'key', 'cache_evict_key_invalid');
  }
  const { tags } = validateOptions(CacheEvictOptionsDto, options, messages, 'partial') as {
    tags?: CacheTagList<This, Args>;
  };

  return (target: object, propertyKey: string | symbol, descriptor: PropertyDescriptor): void => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'cache_evict',
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    const observable = returnsObservable(target, propertyKey);
    injectCache(target);

    const wrapper = function (this: This, ...args: Args): unknown {
      const cache = cacheOf(this, messages, 'cache_evict_no_module', names);
      if (cache instanceof Error) return failed(cache, observable);
      const evict = async (last: { value: unknown } | undefined): Promise<unknown> => {
        const named: unknown = typeof keys === 'function' ? keys.apply(this, args) : keys;
        const tagged = typeof tags === 'function' ? tags.apply(this, args) : tags;
        // Checked by delete() and deleteByTag(): a function's wrong answer rejects in the catalog's words.
        const list = (Array.isArray(named) ? named : [named]) as string[];
        const evicted = list.map((k) => cache.delete(k));
        if (tagged === undefined || (Array.isArray(tagged) && tagged.length === 0)) {
          await Promise.all(evicted);
        } else await Promise.all([...evicted, cache.deleteByTag(tagged)]);
        return last?.value;
      };
      return onSuccess(() => original.apply(this, args), evict, observable);
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
