import { Inject, Optional, StreamableFile } from '@nestjs/common';
import { ROUTE_ARGS_METADATA } from '@nestjs/common/constants.js';
import { BufferLockConfigError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';

/**
 * The cache key of a decorated method: a string, or a function of the method's arguments (called
 * with `this` bound to the instance) that returns one.
 *
 * @example
 * ```ts
 * const key: SingleFlightKey<ReportsController, [string]> = (id) => `report:${id}`;
 * ```
 */
export type SingleFlightKey<This = unknown, Args extends unknown[] = never[]> =
  string | ((this: This, ...args: Args) => string);

/**
 * What `@SingleFlight(...)` and `@Cached(...)` return: a decorator for one method.
 *
 * @example
 * ```ts
 * const decorate: KeyedMethodDecorator = SingleFlight('nightly-report');
 * ```
 */
export type KeyedMethodDecorator = <M extends (...args: never) => unknown>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<M>,
) => void;

/**
 * The decorated method itself; anything else (a getter, a field) is refused with `code`.
 *
 * @example
 * ```ts
 * const original = originalMethod<() => unknown>(descriptor, 'build', messages, 'single_flight_not_method');
 * ```
 */
export function originalMethod<F>(
  descriptor: TypedPropertyDescriptor<never>,
  propertyKey: string | symbol,
  messages: BufferLockMessages,
  code: MessageId,
): F {
  const original: unknown = descriptor.value;
  if (typeof original !== 'function') throw configError(messages, String(propertyKey), code);
  return original as F;
}

/**
 * Whether `key` is a key form the decorators take.
 *
 * @example
 * ```ts
 * isKeyForm('report'); // true
 * isKeyForm((id: string) => `report:${id}`); // true
 * isKeyForm(''); // false
 * ```
 */
export const isKeyForm = (key: unknown): boolean =>
  (typeof key === 'string' && key !== '') || typeof key === 'function';

/**
 * Whether `options` is a decorator's options argument: left out (`undefined`) or an object that
 * is no array. Anything else (`@SingleFlight('k', 'skip')`) would be silently ignored.
 *
 * @example
 * ```ts
 * isOptionsForm({ onBusy: 'skip' }); // true
 * isOptionsForm('skip'); // false
 * ```
 */
export const isOptionsForm = (options: unknown): boolean =>
  options === undefined ||
  (typeof options === 'object' && options !== null && !Array.isArray(options));

/**
 * The key of one call, from its own arguments.
 *
 * @example
 * ```ts
 * keyOf((id: string) => `report:${id}`, controller, ['42']); // 'report:42'
 * ```
 */
export function keyOf<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  self: This,
  args: Args,
): string {
  return typeof key === 'function' ? key.apply(self, args) : key;
}

/**
 * Whether the method is declared to return an Observable (duck-typed: any copy of rxjs).
 *
 * @example
 * ```ts
 * const why = returnsObservable(target, propertyKey) ? 'it returns an Observable' : undefined;
 * ```
 */
export function returnsObservable(target: object, propertyKey: string | symbol): boolean {
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  const prototype = (type as { prototype?: Record<string, unknown> } | undefined)?.prototype;
  return typeof prototype?.subscribe === 'function' && typeof prototype.pipe === 'function';
}

// RouteParamtypes.RESPONSE and .NEXT of @nestjs/common (the enum is not exported at its root).
const RESPONSE_PARAM = 1;
const NEXT_PARAM = 2;

/**
 * Why the method's return value is not its whole answer, when its metadata tells: a `@Res()` or
 * `@Next()` parameter (the handler answers through the platform's response), or a declared
 * `StreamableFile`. Parameter decorators run before method decorators, so they are known here.
 *
 * @example
 * ```ts
 * const reason = notAPlainValue(target, propertyKey); // 'it takes @Res()', or undefined
 * ```
 */
export function notAPlainValue(target: object, propertyKey: string | symbol): string | undefined {
  const params = (Reflect.getMetadata(ROUTE_ARGS_METADATA, target.constructor, propertyKey) ??
    {}) as Record<string, unknown>;
  const types = Object.keys(params).map((key) => Number(key.split(':')[0]));
  if (types.includes(RESPONSE_PARAM)) return 'it takes @Res()';
  if (types.includes(NEXT_PARAM)) return 'it takes @Next()';
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  if (type === StreamableFile) return 'it returns a StreamableFile';
  return undefined;
}

const injected = new WeakMap<object, Set<symbol>>();

/**
 * Has Nest fill `property` of every instance with `token` (property injection; none if absent).
 *
 * @example
 * ```ts
 * injectOnce(target, ENGINE, SingleFlightEngine); // this[ENGINE] is the module's engine
 * ```
 */
export function injectOnce(target: object, property: symbol, token: unknown): void {
  let done = injected.get(target);
  if (!done) injected.set(target, (done = new Set()));
  if (done.has(property)) return;
  done.add(property);
  Inject(token as never)(target, property);
  Optional()(target, property);
}

/**
 * Puts `wrapper` in the method's place, with every metadata entry of the original (as `@Get`,
 * `@Cron`, `@OnEvent` leave), so other decorators keep working in either order.
 *
 * @example
 * ```ts
 * replaceMethod(descriptor, original, async function (this: unknown, ...args: never[]) {
 *   return original.apply(this, args);
 * });
 * ```
 */
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

/**
 * One configuration error in the catalog's words.
 *
 * @example
 * ```ts
 * throw configError(messages, 'key', 'single_flight_key_invalid');
 * ```
 */
export function configError(
  messages: BufferLockMessages,
  property: string,
  code: MessageId,
  params?: Readonly<Record<string, string>>,
): BufferLockConfigError {
  return new BufferLockConfigError([{ property, code, message: messages.render(code, params) }]);
}
