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
import type { SingleFlight } from './single-flight.decorator.js';

/**
 * `@Cached` and `@CachePut`: the method is checked where its class is defined (a whole value, no
 * Observable), and replaced by one that runs `call` with the instance's cache.
 */
export function cacheMethod<This, Args extends unknown[]>(
  messages: BufferLockMessages,
  decorator: 'cached' | 'cache_put',
  call: (
    cache: BufferCache,
    self: This,
    args: Args,
    original: (this: This, ...args: Args) => unknown,
  ) => Promise<unknown>,
): ReturnType<typeof SingleFlight> {
  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      decorator,
    );
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    const why = returnsObservable(target, propertyKey)
      ? 'it returns an Observable'
      : notAPlainValue(target, propertyKey);
    if (why) {
      throw configError(messages, 'method', `${decorator}_unsupported`, { ...names, WHAT: why });
    }
    injectCache(target);

    const wrapper = function (this: This, ...args: Args): Promise<unknown> {
      const cache = cacheOf(this, messages, `${decorator}_no_module`, names);
      if (cache instanceof Error) return Promise.reject(cache);
      try {
        return call(cache, this, args, original);
      } catch (error) {
        return Promise.reject(error);
      }
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}
