import { Inject, Optional } from '@nestjs/common';
import { BufferLockConfigError } from '../errors/lock.error.js';
import { BufferLockNotImportedError } from '../errors/buffer-lock-not-imported.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import {
  resolveSingleFlightOptions,
  type SingleFlightOptions,
} from '../options/buffer-lock.options.js';
import { SingleFlightEngine } from '../single-flight/single-flight.engine.js';

/** The instance property Nest fills with the engine (property injection, per instance). */
const ENGINE: unique symbol = Symbol('BufferLock.engine');
const injected = new WeakSet<object>();

/**
 * The cache key of a `@SingleFlight` method: a string, or a function of the method's arguments
 * (called with `this` bound to the instance) that returns one.
 *
 * @example
 * ```ts
 * const key: SingleFlightKey<ReportsController, [string]> = (id) => `report:${id}`;
 * ```
 */
export type SingleFlightKey<This = unknown, Args extends unknown[] = never[]> =
  string | ((this: This, ...args: Args) => string);

const returnsObservable = (target: object, propertyKey: string | symbol): boolean => {
  const type: unknown = Reflect.getMetadata('design:returntype', target, propertyKey);
  const prototype = (type as { prototype?: Record<string, unknown> } | undefined)?.prototype;
  // Duck-typed, so an Observable from another copy of rxjs counts too.
  return typeof prototype?.subscribe === 'function' && typeof prototype.pipe === 'function';
};

/** Copies every metadata entry of `from` (as `@Get`, `@Cron`, `@OnEvent` leave) onto `to`. */
const copyMetadata = (from: object, to: object): void => {
  for (const key of Reflect.getOwnMetadataKeys(from)) {
    Reflect.defineMetadata(key, Reflect.getOwnMetadata(key, from), to);
  }
};

/**
 * Runs the method under a Redis lock on `key`, so that across every worker only one runs it at a
 * time; the others wait for it, skip, or get a 409 (`onBusy`). The method's value and exception
 * pass through unchanged; the lock is released when it settles. Sync methods become async (they
 * return a Promise). A method whose declared return type is `Observable` returns an Observable
 * that takes the lock on subscription and holds it until completion. When Redis is in trouble the
 * error is logged (rate limited) and the method runs without a cross-worker lock.
 *
 * Works on controller handlers and provider methods, request-scoped, durable or default scope,
 * next to `@Get`, `@UseGuards`, `@Cron` or `@OnEvent` in either order. The class's module must see
 * `BufferLockModule` (import it, or register it with `isGlobal: true`).
 *
 * @example
 * ```ts
 * @Get(':id')
 * @SingleFlight((id: string) => `report:${id}`, { lockTimeout: 5 })
 * async report(@Param('id') id: string): Promise<Report> {
 *   return (await this.cache.get(id)) ?? (await this.buildAndCache(id));
 * }
 * ```
 */
export function SingleFlight<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  options: SingleFlightOptions = {},
): <M extends (...args: never) => unknown>(
  target: object,
  propertyKey: string | symbol,
  descriptor: TypedPropertyDescriptor<M>,
) => void {
  const messages = new BufferLockMessages();
  if (!((typeof key === 'string' && key !== '') || typeof key === 'function')) {
    throw configError(messages, 'key', 'single_flight_key_invalid');
  }
  const settings = resolveSingleFlightOptions(options, messages);

  return (target, propertyKey, descriptor) => {
    const original = descriptor.value as ((this: This, ...args: Args) => unknown) | undefined;
    if (typeof original !== 'function') {
      throw configError(messages, String(propertyKey), 'single_flight_not_method');
    }
    if (!injected.has(target)) {
      injected.add(target);
      Inject(SingleFlightEngine)(target, ENGINE);
      Optional()(target, ENGINE);
    }
    const observable = returnsObservable(target, propertyKey);
    const className = target.constructor.name;
    const methodName = String(propertyKey);

    const wrapper = function (this: This, ...args: Args): unknown {
      const engine = (this as { [ENGINE]?: SingleFlightEngine })[ENGINE];
      if (!engine) {
        throw new BufferLockNotImportedError(
          messages.render('single_flight_no_module', { CLASS: className, METHOD: methodName }),
        );
      }
      const work = () => original.apply(this, args);
      if (observable) {
        return engine.runObservable(cacheKeyOf(key, this, args), work as never, settings);
      }
      try {
        return engine.run(cacheKeyOf(key, this, args), work, settings);
      } catch (error) {
        return Promise.reject(error);
      }
    };
    copyMetadata(original, wrapper);
    Object.defineProperty(wrapper, 'name', { value: original.name });
    descriptor.value = wrapper as unknown as typeof descriptor.value;
  };
}

function cacheKeyOf<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  self: This,
  args: Args,
): string {
  return typeof key === 'function' ? key.apply(self, args) : key;
}

function configError(
  messages: BufferLockMessages,
  property: string,
  code: MessageId,
): BufferLockConfigError {
  return new BufferLockConfigError([{ property, code, message: messages.render(code) }]);
}
