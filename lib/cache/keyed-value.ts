// The interceptor's value of a message or a GraphQL field: under a key it computed (or the
// route's `@CacheKey()`), built once across the fleet, the handler not run on a hit.
import { Logger, type CallHandler } from '@nestjs/common';
import { of, throwError, type Observable } from 'rxjs';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { BufferCacheOptions } from '../options/cache.options.js';
import { LOOKUP, type BufferCache } from './buffer-cache.service.js';
import { Carried, handlerOutcome, isHandlerOutcome, streaming } from './handler-outcome.js';
import { Streamed } from './http-stream.js';

export interface KeyedCall {
  readonly handler: object;
  readonly next: CallHandler;
  readonly key: string;
  /** `'r'`: a key the interceptor made; none: the route's `@CacheKey()`. */
  readonly space: 'r' | undefined;
  readonly options: BufferCacheOptions | undefined;
}

/**
 * The value under `key`; a value that streams (emits more than once) is sent live, as the
 * handler's errors are, and none of them is cached. A failing cache answers with the handler.
 */
export async function keyedValue(
  parts: { readonly cache: BufferCache; readonly messages: BufferLockMessages },
  { handler, next, key, space, options }: KeyedCall,
): Promise<Observable<unknown>> {
  let kept: Carried | undefined;
  let produced: { value: unknown } | undefined;
  let ran = false;
  let unsubscribe: (() => void) | undefined;
  const factory = async (): Promise<unknown> => {
    ran = true;
    const made = await handlerOutcome(next.handle(), (end) => (unsubscribe = end));
    if (made instanceof Streamed) {
      streaming.add(handler);
      throw (kept = new Carried(made));
    }
    produced = made;
    return made.value;
  };
  try {
    return of((await parts.cache[LOOKUP](key, factory, options, space)).value);
  } catch (error) {
    unsubscribe?.();
    if (kept && error === kept) return (kept.value as Streamed).stream;
    if (isHandlerOutcome(error)) {
      // Another call's handler failed: this one runs its own.
      if (!ran) return next.handle();
      return throwError(() => (error instanceof Carried ? error.value : error));
    }
    const text = parts.messages.render('cache_interceptor_failed', { ERROR: errorText(error) });
    Logger.error(text, 'BufferCacheInterceptor');
    return produced ? of(produced.value) : next.handle();
  }
}
