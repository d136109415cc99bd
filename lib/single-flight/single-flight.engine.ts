import { EventEmitter } from 'node:events';
import { defer, of, throwError, type Observable } from 'rxjs';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import {
  resolveFlightOptions,
  type BufferLockOptions,
  type FlightOptions,
} from '../options/buffer-lock.options.js';
import {
  perCallSettings,
  type SingleFlightOptions,
  type SingleFlightSettings,
} from '../options/single-flight.options.js';
import { SharedResultStore } from './shared-result.js';
import {
  breakerChannel,
  flightChannel,
  lockLostChannel,
  type FlightTrace,
} from '../telemetry/channels.js';
import { LockAdmission, type SingleFlightLock } from './admission.js';
import type { CircuitBreaker } from './circuit-breaker.js';
import type { SingleFlightEvents } from '../types/events.js';
import { FlightTracing } from './flight-trace.js';
import { LocalFlights } from './local-flights.js';
import { lockLostMessage } from './lock-lost-message.js';
import { LockedRun, type FlightHooks } from './locked-run.js';
import { PubSubWaitStrategy } from './pubsub-wait.strategy.js';
import { SettingsResolver } from './settings-resolver.js';
import { ThrottledLog } from './throttled-log.js';
import type { WaitStrategy } from './wait-strategy.js';

/**
 * The engine's flight across processes with hooks, for the library's own layers.
 *
 * @example
 * ```ts
 * const built = await engine[CROSS_PROCESS](key, lock.redisKey(key), work, settings, hooks);
 * ```
 */
export const CROSS_PROCESS: unique symbol = Symbol('crossProcess');

/**
 * The state of the engine's wake-up subscriber, for the library's own health check.
 *
 * @example
 * ```ts
 * const state = await engine[SUBSCRIBER_STATE](); // 'usable', 'unusable' or 'none'
 * ```
 */
export const SUBSCRIBER_STATE: unique symbol = Symbol('subscriberState');

/**
 * Whether busy callers are woken by pub/sub now: `usable`, `unusable` (they poll until a
 * subscription is confirmed again), or `none` (the engine's wait strategy is not pub/sub).
 *
 * @example
 * ```ts
 * const subscriber: SubscriberState = details.subscriber; // of a BufferLockHealthDetails
 * if (subscriber === 'unusable') logger.warn('busy callers poll until pub/sub is back');
 * ```
 */
export type SubscriberState = 'usable' | 'unusable' | 'none';

/**
 * What a {@link SingleFlightEngine} is made of.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock, options: { lockTimeout: 5, share: true } });
 * ```
 */
export interface SingleFlightEngineOptions {
  /** The lock: a `RedisLockService`. */
  readonly lock: SingleFlightLock;
  /**
   * The module's options for calls, logging, sharing and the breaker. Those left out take their
   * defaults; `ttl` defaults to the lock's.
   */
  readonly options?: Partial<Omit<BufferLockOptions, 'redis'>> | FlightOptions;
  /** Default: English, with the lock's overrides. */
  readonly messages?: BufferLockMessages;
  /**
   * How a busy `'wait'` caller learns that the holder may be done. Default: pub/sub wake-up. The
   * subscription failures of a `PubSubWaitStrategy` are logged (`subscriber_failed`).
   */
  readonly waitStrategy?: WaitStrategy;
  /** The clock of the log's rate limit and of the breaker (ms since the epoch). */
  readonly now?: () => number;
}

/**
 * Single flight across processes: for one key, one call in the whole system runs the work at a
 * time, and the others share its outcome.
 *
 * - In one process, concurrent calls for a key are one flight: the first leads, the rest get its
 *   promise (value and error alike) and never touch Redis.
 * - Across processes, the leader takes the Redis lock; the other processes' leaders wait for its
 *   release (woken by pub/sub), then try again, or, with `share: true`, take its result.
 * - While the work runs, a watchdog extends the lock; a lost lock emits `'lockLost'` and aborts
 *   `SingleFlight.signal()`.
 * - Redis trouble is logged (rate limited) and the work runs without a cross-worker lock, or the
 *   call fails with a `RedisUnavailableError` (`onRedisError: 'throw'`); the circuit breaker
 *   skips a failing Redis for a while.
 *
 * `@SingleFlight` runs through it in a Nest app; without Nest, make one with `new`.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock: new RedisLockService({ redis: () => new Redis() }) });
 * const report = await engine.run('report:1', () => buildReport(1), { share: true });
 * ```
 */
export class SingleFlightEngine extends EventEmitter<SingleFlightEvents> {
  private readonly lock: SingleFlightLock;
  private readonly settings: SettingsResolver;
  private readonly flights = new LocalFlights();
  private readonly admission: LockAdmission;
  private readonly runs: LockedRun;
  /** The flights while the flight channel has subscribers. */
  private readonly tracing: FlightTracing;
  private readonly waitStrategy: WaitStrategy;

  constructor(parts: SingleFlightEngineOptions) {
    super();
    const { lock, now } = parts;
    this.lock = lock;
    const messages = parts.messages ?? new BufferLockMessages();
    const options = resolveFlightOptions(parts.options, lock.ttl, messages);
    this.settings = new SettingsResolver(perCallSettings(options));
    const client = () => lock.getClient();
    const log = new ThrottledLog(options.logger, messages, options.logInterval * 1000, now);
    const results = new SharedResultStore({ lock, serializer: options.serializer, messages });
    const waitStrategy = parts.waitStrategy ?? new PubSubWaitStrategy({ client });
    this.waitStrategy = waitStrategy;
    // The subscription fails in the background, where no caller sees it: the log is where it shows.
    if (waitStrategy instanceof PubSubWaitStrategy) {
      waitStrategy.addErrorListener((error) =>
        log.warn(
          'subscriber_failed',
          messages.render('subscriber_failed', { ERROR: error.message }),
        ),
      );
    }
    this.admission = new LockAdmission({
      lock,
      waitStrategy,
      results,
      messages,
      log,
      circuitBreaker: options.circuitBreaker,
      now,
      onBreakerChange: (state, previous) => {
        if (breakerChannel.hasSubscribers) breakerChannel.publish({ state, previous });
        this.tell('breaker', state, previous);
      },
    });
    this.runs = new LockedRun({
      lock,
      admission: this.admission,
      results,
      messages,
      log,
      onLockLost: (event) => {
        if (lockLostChannel.hasSubscribers) {
          lockLostChannel.publish(lockLostMessage(event, options.traceKeys));
        }
        this.emit('lockLost', event);
        options.onLockLost?.(event);
      },
    });
    this.tracing = new FlightTracing({
      flights: this.flights,
      runs: this.runs,
      admission: this.admission,
      traceKeys: options.traceKeys,
    });
  }

  /** The circuit breaker in front of Redis, if any. */
  get breaker(): Pick<CircuitBreaker, 'state' | 'consecutiveFailures'> | undefined {
    return this.admission.breaker;
  }

  /**
   * Stops what the engine watches in the background: while its circuit breaker is open it listens
   * for the lock's client to be `'ready'` again and sends a PING now and then, so that the lock is
   * used again as soon as Redis is back. `BufferLockModule` calls it at application shutdown; call
   * it yourself for an engine made with `new`. Calls still run after it (the breaker then waits
   * out `openSeconds`).
   */
  close(): void {
    this.admission.close();
  }

  /** How many keys have a flight in progress in this process. */
  get inFlight(): number {
    return this.flights.size;
  }

  /**
   * `options` over the engine's defaults, complete. Callers that run often with the same options
   * (a decorated method) keep the result and pass it to {@link run}: it is then used as it is.
   */
  settingsFor(options?: SingleFlightOptions | SingleFlightSettings): SingleFlightSettings {
    return this.settings.resolve(options);
  }

  /**
   * Runs `work` as the single flight of `cacheKey` and resolves to its value, or rejects with its
   * error, unchanged; a caller that joined a flight in progress gets that flight's outcome. The
   * lock is released when `work` settles. `'skip'` resolves `undefined` without running it. If
   * `work` returns an Observable while the lock is held, the lock is held until that Observable
   * completes, errors or is unsubscribed.
   */
  run<T>(
    cacheKey: string,
    work: () => T,
    options?: SingleFlightOptions | SingleFlightSettings,
  ): Promise<Awaited<T> | undefined> {
    const settings = this.settings.resolve(options);
    // A key that is no string is not a flight: acquire reports it in the catalog's words.
    if (typeof cacheKey !== 'string') return this.runs.promise(cacheKey, undefined, work, settings);
    const redisKey = this.lock.redisKey(cacheKey);
    // One boolean read when nobody listens: no trace object, no closure.
    if (flightChannel.hasSubscribers) return this.tracing.run(cacheKey, redisKey, work, settings);
    const existing = this.flights.promise<Awaited<T> | undefined>(redisKey);
    if (existing) {
      if (settings.onBusy === 'skip') return Promise.resolve(undefined);
      if (settings.onBusy === 'throw') return Promise.reject(this.admission.busy(cacheKey));
      return existing;
    }
    return this.flights.startPromise(redisKey, () =>
      this.runs.promise(cacheKey, redisKey, work, settings),
    );
  }

  /**
   * The Observable form of {@link run}: nothing happens until subscription. In this process,
   * overlapping subscriptions for `cacheKey` are one flight: the first takes the lock and
   * subscribes to `work()` once; the others join it, get every value emitted so far (replayed)
   * and then the rest, without touching Redis. The lock is held until that subscription
   * completes, errors, or every subscriber has unsubscribed. A `'skip'` subscriber that finds the
   * key busy emits `undefined` and completes; `'throw'` errors with a `LockBusyError`. The
   * settings of the flight's first subscriber apply; results are never shared across processes.
   *
   * @example
   * ```ts
   * const prices$ = engine.runObservable('prices', () => fetchPrices$());
   * prices$.subscribe(render); // two overlapping subscriptions: one lock, one fetch
   * prices$.subscribe(log);
   * ```
   */
  runObservable<T>(
    cacheKey: string,
    work: () => Observable<T>,
    options?: SingleFlightOptions | SingleFlightSettings,
  ): Observable<T | undefined> {
    return defer((): Observable<T | undefined> => {
      const settings = { ...this.settings.resolve(options), share: false };
      // A key that is no string is not a flight: acquire reports it in the catalog's words.
      if (typeof cacheKey !== 'string') {
        return this.runs.observable(cacheKey, undefined, work, settings);
      }
      const redisKey = this.lock.redisKey(cacheKey);
      if (flightChannel.hasSubscribers) {
        return this.tracing.stream(cacheKey, redisKey, work, settings);
      }
      const existing = this.flights.stream<T | undefined>(redisKey);
      if (existing) {
        if (settings.onBusy === 'skip') return of(undefined);
        if (settings.onBusy === 'throw') return throwError(() => this.admission.busy(cacheKey));
        return existing;
      }
      const source = this.runs.observable(cacheKey, redisKey, work, settings);
      return this.flights.startStream(redisKey, source);
    });
  }

  /**
   * One flight across processes with `hooks`, and no in-process flight: for callers that keep
   * their own (the cache). Internal to the library.
   */
  [CROSS_PROCESS]<T>(
    cacheKey: string,
    redisKey: string,
    work: () => T,
    settings: SingleFlightSettings,
    hooks: FlightHooks,
    trace?: FlightTrace,
  ): Promise<Awaited<T> | undefined> {
    return this.runs.promise(cacheKey, redisKey, work, settings, hooks, trace);
  }

  /** The wake-up subscriber's state now. Internal to the library (the health check reads it). */
  async [SUBSCRIBER_STATE](): Promise<SubscriberState> {
    if (!(this.waitStrategy instanceof PubSubWaitStrategy)) return 'none';
    return (await this.waitStrategy.subscriberUsable()) ? 'usable' : 'unusable';
  }

  /** emit() that a throwing listener cannot break: listeners' errors are their own. */
  private tell<E extends keyof SingleFlightEvents>(event: E, ...args: SingleFlightEvents[E]): void {
    try {
      (this.emit as (e: E, ...a: SingleFlightEvents[E]) => boolean)(event, ...args);
    } catch {
      // A listener's error is the listener's.
    }
  }
}
