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
  checkArguments,
  configError,
  injectOnce,
  keyOf,
  notAPlainValue,
  originalMethod,
  replaceMethod,
  returnsObservable,
  type SingleFlightKey,
  type BufferLockDecorator,
} from './method-metadata.js';

const ENGINE: unique symbol = Symbol('BufferLock.engine');

/**
 * Makes the method a single flight on `key` across every worker sharing one Redis: one holder
 * runs it under a Redis lock (extended while it runs); the others wait for its release, then run
 * it, skip or get a 409 (`onBusy`), or take its result (`share: true`). With Redis in trouble it
 * runs without the lock (logged), or fails with a 503 (`onRedisError: 'throw'`).
 *
 * @example
 * ```ts
 * @SingleFlight((id: string) => `report:${id}`, { onBusy: 'wait' })
 * async rebuild(id: string): Promise<Report> {
 *   return this.reports.render(id); // one worker at a time, fleet-wide
 * }
 * ```
 */
export function SingleFlight<
  This,
  Args extends unknown[],
  const Options extends SingleFlightOptions = SingleFlightOptions,
>(
  key: SingleFlightKey<This, Args>,
  options: Options = {} as Options,
): BufferLockDecorator<
  Args,
  unknown,
  Options extends { onBusy: 'skip' } ? true : false,
  Options extends { share: true } ? true : false
> {
  const messages = new BufferLockMessages();
  checkArguments(messages, 'single_flight', key, options);
  const own = resolveSingleFlightOptions(options, messages);

  return (target: object, propertyKey: string | symbol, descriptor: PropertyDescriptor): void => {
    const original = originalMethod<(this: This, ...args: Args) => unknown>(
      descriptor as never,
      propertyKey,
      messages,
      'single_flight',
    );
    injectOnce(target, ENGINE, SingleFlightEngine);
    const observable = returnsObservable(target, propertyKey);
    const names = { CLASS: target.constructor.name, METHOD: String(propertyKey) };
    // Why a result of this method cannot be shared, if it cannot.
    const why = notAPlainValue(target, propertyKey);
    const shareError = (): BufferLockConfigError =>
      configError(messages, 'share', 'single_flight_share_response', { ...names, WHAT: why! });
    // `share: true` here is refused now; the module's default at the call.
    if (why && own.share === true) throw shareError();
    // Merged once per engine (per Nest app).
    const settingsByEngine = new WeakMap<SingleFlightEngine, SingleFlightSettings>();
    const settingsFor = (engine: SingleFlightEngine): SingleFlightSettings => {
      let settings = settingsByEngine.get(engine);
      if (!settings) settingsByEngine.set(engine, (settings = engine.settingsFor(own)));
      return settings;
    };

    const wrapper = function (this: This, ...args: Args): unknown {
      const engine = (this as { [ENGINE]?: SingleFlightEngine })[ENGINE];
      if (!engine) {
        throw new BufferLockNotImportedError(messages.render('single_flight_no_module', names));
      }
      const work = () => original.apply(this, args);
      const settings = settingsFor(engine);
      if (why && settings.share) return Promise.reject(shareError());
      if (observable) return engine.runObservable(keyOf(key, this, args), work as never, settings);
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
 * Inside a `@SingleFlight` method: aborts when its lock is lost (or `maxHold` is reached); never
 * outside a locked run.
 *
 * @example
 * ```ts
 * for (const batch of batches) await write(batch, { signal: SingleFlight.signal() });
 * ```
 */
SingleFlight.signal = function signal(): AbortSignal {
  return currentFlight()?.signal ?? NEVER_ABORTED;
};

/**
 * Inside a `@SingleFlight` method, with `fencing: true` and the lock held: its fencing number,
 * larger than every earlier holder's. `undefined` otherwise.
 *
 * @example
 * ```ts
 * await db.query('UPDATE report SET body = $1, fence = $2 WHERE fence < $2', [body, SingleFlight.fence()]);
 * ```
 */
SingleFlight.fence = function fence(): number | undefined {
  return currentFlight()?.fence;
};

const NEVER_ABORTED: AbortSignal = new AbortController().signal;
