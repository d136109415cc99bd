import type { BufferLockConfigError } from '../errors/lock.error.js';
import { BufferLockNotImportedError } from '../errors/buffer-lock-not-imported.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import {
  resolveSingleFlightOptions,
  type SingleFlightOptions,
  type SingleFlightSettings,
} from '../options/single-flight.options.js';
import { currentFlight } from '../single-flight/flight-context.js';
import { SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import {
  configError,
  injectOnce,
  isKeyForm,
  isOptionsForm,
  keyOf,
  originalMethod,
  type KeyedMethodDecorator,
  notAPlainValue,
  replaceMethod,
  returnsObservable,
  type SingleFlightKey,
} from './method-metadata.js';

/** The instance property Nest fills with the engine (property injection, per instance). */
const ENGINE: unique symbol = Symbol('BufferLock.engine');

/**
 * Makes the method a single flight on `key` across every worker sharing one Redis. In this
 * process, concurrent calls for the key join the first one and get its value or exception (one
 * run, one Redis acquire). Across processes, one holder runs the method under a Redis lock; the
 * others wait for its release (woken by pub/sub) and then run it, skip, or get a 409 (`onBusy`).
 * With `share: true` a waiter in another process returns the holder's serialized result instead
 * of running the method. The method's value and exception pass through unchanged; the lock is
 * released when it settles, and extended every ttl/3 while it runs (up to `maxHold`). Inside the
 * method, `SingleFlight.signal()` aborts if the lock is lost and `SingleFlight.fence()` gives the
 * fencing number (`fencing: true`). Sync methods become async (they return a Promise). A method
 * whose declared return type is `Observable` returns an Observable that takes the lock on
 * subscription and holds it until completion; overlapping subscriptions in this process share one
 * run of the method and one lock (a late subscriber is replayed the values emitted so far).
 * When Redis is in trouble the error is logged (rate limited) and the method runs without a
 * cross-worker lock, or, with `onRedisError: 'throw'`, the call fails with a 503; after repeated
 * failures the circuit breaker skips Redis for a while.
 *
 * Works on controller handlers and provider methods, request-scoped, durable or default scope,
 * next to `@Get`, `@UseGuards`, `@Cron` or `@OnEvent` in either order. The class's module must see
 * `BufferLockModule` (import it, or register it with `isGlobal: true`).
 *
 * @example
 * ```ts
 * // The hit path reads the cache without the lock; only a miss takes it.
 * @Get(':id')
 * async report(@Param('id') id: string): Promise<Report> {
 *   return (await this.cache.get<Report>(id)) ?? (await this.reports.build(id));
 * }
 *
 * // ReportsService: one worker builds; the others wait, then find the entry.
 * @SingleFlight((id: string) => `report:${id}`)
 * async build(id: string): Promise<Report> {
 *   const cached = await this.cache.get<Report>(id); // built while this call waited?
 *   if (cached) return cached;
 *   const report = await this.render(id);
 *   await this.cache.set(id, report);
 *   return report;
 * }
 * ```
 */
export function SingleFlight<This, Args extends unknown[]>(
  key: SingleFlightKey<This, Args>,
  options: SingleFlightOptions = {},
): KeyedMethodDecorator {
  const messages = new BufferLockMessages();
  if (!isKeyForm(key)) {
    throw configError(messages, 'key', 'single_flight_key_invalid');
  }
  if (!isOptionsForm(options)) {
    throw configError(messages, 'options', 'single_flight_options_invalid');
  }
  const own = resolveSingleFlightOptions(options, messages);

  return (target, propertyKey, descriptor) => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'single_flight_not_method',
    );
    injectOnce(target, ENGINE, SingleFlightEngine);
    const observable = returnsObservable(target, propertyKey);
    const className = target.constructor.name;
    const methodName = String(propertyKey);
    const cannotShare = notAPlainValue(target, propertyKey);
    const shareError = (): BufferLockConfigError =>
      configError(messages, 'share', 'single_flight_share_response', {
        CLASS: className,
        METHOD: methodName,
        WHAT: cannotShare!,
      });
    // share: true on the decorator is refused now; the module's default at the first call.
    if (cannotShare && own.share === true) throw shareError();
    // The method's options over its engine's defaults, merged once per engine (per Nest app).
    const settingsByEngine = new WeakMap<SingleFlightEngine, SingleFlightSettings>();
    const settingsFor = (engine: SingleFlightEngine): SingleFlightSettings => {
      let settings = settingsByEngine.get(engine);
      if (!settings) settingsByEngine.set(engine, (settings = engine.settingsFor(own)));
      return settings;
    };

    const wrapper = function (this: This, ...args: Args): unknown {
      const engine = (this as { [ENGINE]?: SingleFlightEngine })[ENGINE];
      if (!engine) {
        throw new BufferLockNotImportedError(
          messages.render('single_flight_no_module', { CLASS: className, METHOD: methodName }),
        );
      }
      const work = () => original.apply(this, args);
      const settings = settingsFor(engine);
      if (cannotShare && settings.share) return Promise.reject(shareError());
      if (observable) {
        return engine.runObservable(keyOf(key, this, args), work as never, settings);
      }
      try {
        return engine.run(keyOf(key, this, args), work, settings);
      } catch (error) {
        return Promise.reject(error);
      }
    };
    replaceMethod(descriptor as never, original as never, wrapper as never);
  };
}

/**
 * Inside a `@SingleFlight` method: the AbortSignal that aborts when the method's lock is lost (an
 * extension found it gone, Redis was unreachable for a whole TTL, or `maxHold` was reached). Hand
 * it to `fetch`, your database driver or your own loop. Outside a locked run it never aborts.
 *
 * @example
 * ```ts
 * @SingleFlight('nightly', { ttl: 30, maxHold: 3600 })
 * async nightly(): Promise<void> {
 *   for (const batch of batches) {
 *     SingleFlight.signal().throwIfAborted();
 *     await write(batch);
 *   }
 * }
 * ```
 */
SingleFlight.signal = function signal(): AbortSignal {
  return currentFlight()?.signal ?? NEVER_ABORTED;
};

/**
 * Inside a `@SingleFlight` method, with `fencing: true` and the lock held: this holder's fencing
 * number, larger than that of every earlier holder of the key. `undefined` otherwise.
 *
 * @example
 * ```ts
 * @SingleFlight((id: string) => `report:${id}`)
 * async build(id: string): Promise<void> {
 *   await db.query('UPDATE report SET body = $1, fence = $2 WHERE id = $3 AND fence < $2', [
 *     await render(id), SingleFlight.fence(), id,
 *   ]);
 * }
 * ```
 */
SingleFlight.fence = function fence(): number | undefined {
  return currentFlight()?.fence;
};

const NEVER_ABORTED: AbortSignal = new AbortController().signal;
