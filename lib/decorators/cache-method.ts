import type { BufferCache } from '../cache/buffer-cache.service.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { cacheOf, injectCache } from './injected-cache.js';
import {
  configError,
  notAPlainValue,
  originalMethod,
  replaceMethod,
  returnsObservable,
} from './method-metadata.js';
import { failed } from './on-success.js';

/**
 * `@Cached` and `@CachePut`: the method is checked where its class is defined (a whole value, and
 * for `@Cached` no Observable), and replaced by one that runs `call` with the instance's cache.
 */
export function cacheMethod<This, Args extends unknown[]>(
  messages: BufferLockMessages,
  decorator: 'cached' | 'cache_put',
  call: (
    cache: BufferCache,
    self: This,
    args: Args,
    original: (this: This, ...args: Args) => unknown,
    observable: boolean,
  ) => unknown,
): (target: object, propertyKey: string | symbol, descriptor: PropertyDescriptor) => void {
  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      decorator,
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    const observable = returnsObservable(target, propertyKey);
    const why =
      observable && decorator === 'cached'
        ? 'it returns an Observable'
        : notAPlainValue(target, propertyKey);
    if (why) {
      throw configError(messages, 'method', `${decorator}_unsupported`, { ...names, WHAT: why });
    }
    injectCache(target);

    const wrapper = function (this: This, ...args: Args): unknown {
      const cache = cacheOf(this, messages, `${decorator}_no_module`, names);
      if (cache instanceof Error) return failed(cache, observable);
      try {
        return call(cache, this, args, original, observable);
      } catch (error) {
        return failed(error, observable);
      }
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
