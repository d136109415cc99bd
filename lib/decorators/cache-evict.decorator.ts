import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { cacheOf, injectCache } from './injected-cache.js';
import {
  checkArguments,
  configError,
  originalMethod,
  replaceMethod,
  returnsObservable,
} from './method-metadata.js';
import type { SingleFlight } from './single-flight.decorator.js';

/**
 * The entries `@CacheEvict` deletes: a key, keys, or a function of the method's arguments (with
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
 * Deletes the entries of `keys` once the method has returned (or its promise resolved), and
 * only then: a method that throws or rejects deletes nothing. The next call of each key builds it
 * again (once across the fleet), and every worker's `l1` copy is dropped. The method becomes
 * async and resolves to its own value once the entries are gone. A method declared to return an
 * Observable is refused when the class is defined.
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
): ReturnType<typeof SingleFlight> {
  const messages = new BufferLockMessages();
  checkArguments(messages, 'cache_evict', keys, undefined);

  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'cache_evict',
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    if (returnsObservable(target, propertyKey)) {
      const params = { ...names, WHAT: 'it returns an Observable' };
      throw configError(messages, 'method', 'cache_evict_unsupported', params);
    }
    injectCache(target);

    const wrapper = async function (this: This, ...args: Args): Promise<unknown> {
      const cache = cacheOf(this, messages, 'cache_evict_no_module', names);
      if (cache instanceof Error) throw cache;
      const value = await original.apply(this, args);
      const named: unknown = typeof keys === 'function' ? keys.apply(this, args) : keys;
      // Each key is checked by delete(): a function's wrong answer rejects in the catalog's words.
      const list = (Array.isArray(named) ? named : [named]) as string[];
      await Promise.all(list.map((k) => cache.delete(k)));
      return value;
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
