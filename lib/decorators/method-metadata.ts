import { Inject, Optional, StreamableFile } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import type { Observable } from 'rxjs';
import { BufferLockConfigError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import { configViolation } from '../options/config-violation.js';
import { shownValue } from '../options/shown-value.js';
import type { Stored } from '../serialization/stored.js';

/**
 * The key of a decorated method: a string, or a function of the method's arguments (with `this`
 * the instance) that returns one.
 *
 * @example
 * ```ts
 * const key: SingleFlightKey<ReportsController, [string]> = (id) => `report:${id}`;
 * ```
 */
export type SingleFlightKey<This = unknown, Args extends unknown[] = never[]> =
  string | ((this: This, ...args: Args) => string);

/**
 * What `@Cached`, `@CachePut`, `@CacheEvict` and `@SingleFlight` return: a method decorator that
 * compiles only where it works. The method returns `Returns` (a Promise, for the cache
 * decorators: a cached method is async); a key function takes the method's arguments (or fewer,
 * or wider types); with `SkipWhenBusy` (`onBusy: 'skip'`), the method's result admits `undefined`,
 * what a caller gets while another worker holds the lock; with `Serialized` (a value that goes
 * through the serializer: `@Cached`, `@CachePut`, `@SingleFlight` with `share`), the method's
 * result is declared as what comes back, `Stored<T>` (a `Date` as `string`, say).
 *
 * @example
 * ```ts
 * const decorate: BufferLockDecorator<[id: string], Promise<unknown>> = Cached((id: string) => id);
 * ```
 */
export type BufferLockDecorator<
  Args extends unknown[],
  Returns = unknown,
  SkipWhenBusy extends boolean = false,
  Serialized extends boolean = false,
> = <M extends (...args: never) => Returns>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<M> &
    // A descriptor typed `any` (a decorator applied by hand) is not checked.
    (0 extends 1 & M
      ? unknown
      : ((...args: Args) => string) extends (...args: Parameters<M>) => string
        ? unknown
        : { "the key function must take the method's arguments": never }) &
    (SkipWhenBusy extends true
      ? undefined extends Awaited<ReturnType<M>>
        ? unknown
        : { "with onBusy 'skip' the method's result must admit undefined": never }
      : unknown) &
    (Serialized extends true
      ? // What a caller gets a value of: an Observable's values, or the awaited result.
        (ReturnType<M> extends Observable<infer V> ? V : Awaited<ReturnType<M>>) extends infer R
        ? [Stored<R>] extends [R]
          ? unknown
          : {
              "the method's result comes back through the serializer: declare it as Stored<T>": never;
            }
        : unknown
      : unknown),
) => void;

/** A decorator's argument refused; with `given`, the value it was given is shown beside the text. */
export function configError(
  messages: BufferLockMessages,
  property: string,
  code: MessageId,
  params?: Readonly<Record<string, string>>,
  ...given: [value?: unknown]
): BufferLockConfigError {
  const values =
    given.length > 0 ? [{ name: property, value: shownValue(given[0]), isDefault: false }] : [];
  return new BufferLockConfigError([configViolation(messages, property, code, values, params)]);
}

type Decorator = 'cached' | 'single_flight' | 'cache_put' | 'cache_evict';

const isKey = (key: unknown): boolean => typeof key === 'string' && key !== '';
const isKeys = (keys: unknown): boolean =>
  Array.isArray(keys) && keys.length > 0 && keys.every(isKey);

/** Refuses a bad key (`@CacheEvict` takes an array of them too), and options that are no object (`'skip'` would be silently ignored). */
export function checkArguments(
  messages: BufferLockMessages,
  decorator: Decorator,
  key: unknown,
  options: unknown,
): void {
  if (!(isKey(key) || typeof key === 'function' || (decorator === 'cache_evict' && isKeys(key)))) {
    throw configError(messages, 'key', `${decorator}_key_invalid`, undefined, key);
  }
  const isObject = typeof options === 'object' && options !== null && !Array.isArray(options);
  if (options !== undefined && !isObject) {
    throw configError(messages, 'options', `${decorator}_options_invalid`, undefined, options);
  }
}

/** The decorated method; a getter or a field is refused. */
export function originalMethod<F>(
  descriptor: TypedPropertyDescriptor<never>,
  propertyKey: string | symbol,
  messages: BufferLockMessages,
  decorator: Decorator,
): F {
  const original: unknown = descriptor.value;
  if (typeof original === 'function') return original as F;
  throw configError(messages, String(propertyKey), `${decorator}_not_method`);
}

export function keyOf<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  self: This,
  args: Args,
): string {
  return typeof key === 'function' ? key.apply(self, args) : key;
}

/** Duck-typed, so that any copy of rxjs counts. */
export function returnsObservable(target: object, propertyKey: string | symbol): boolean {
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  const prototype = (type as { prototype?: Record<string, unknown> } | undefined)?.prototype;
  return typeof prototype?.subscribe === 'function' && typeof prototype.pipe === 'function';
}

// RouteParamtypes.RESPONSE and .NEXT (the enum is not exported at @nestjs/common's root).
const RESPONSE_PARAM = 1;
const NEXT_PARAM = 2;

/**
 * Why the return value is not the whole answer: a `@Res()` or `@Next()` parameter, or a declared
 * `StreamableFile`. Parameter decorators run before method decorators: their metadata is here.
 */
export function notAPlainValue(target: object, propertyKey: string | symbol): string | undefined {
  const params = (Reflect.getMetadata(ROUTE_ARGS_METADATA, target.constructor, propertyKey) ??
    {}) as Record<string, unknown>;
  const types = Object.keys(params).map((key) => Number(key.split(':')[0]));
  if (types.includes(RESPONSE_PARAM)) return 'it takes @Res()';
  if (types.includes(NEXT_PARAM)) return 'it takes @Next()';
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  return type === StreamableFile ? 'it returns a StreamableFile' : undefined;
}

const injected = new WeakMap<object, Set<symbol>>();

/** Property injection of `token` (none when absent), once per class and property. */
export function injectOnce(target: object, property: symbol, token: unknown): void {
  let done = injected.get(target);
  if (!done) injected.set(target, (done = new Set()));
  if (done.has(property)) return;
  done.add(property);
  Inject(token as never)(target, property);
  Optional()(target, property);
}

/** `wrapper` with the original's metadata (`@Get`, `@Cron`, …): decorators work in either order. */
export function replaceMethod(
  descriptor: TypedPropertyDescriptor<never>,
  original: (...args: never[]) => unknown,
  wrapper: (...args: never[]) => unknown,
): void {
  for (const key of Reflect.getOwnMetadataKeys(original)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, original), wrapper);
  }
  Object.defineProperty(wrapper, 'name', { value: original.name });
  descriptor.value = wrapper as never;
}
