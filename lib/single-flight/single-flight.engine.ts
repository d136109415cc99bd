import { EventEmitter } from 'node:events';
import { defer, finalize, of, tap, throwError, type Observable } from 'rxjs';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { RedisLockService } from '../lock/redis-lock.service.js';
import { resolveFlightOptions, type BufferLockOptions } from '../options/buffer-lock.options.js';
import { LockError } from '../errors/lock.error.js';
import {
  perCallSettings,
  type SingleFlightOptions,
  type SingleFlightSettings,
} from '../options/single-flight.options.js';
import type { Stored } from '../serialization/stored.js';
import { CallSettings } from './call-settings.js';
import {
  breakerChannel,
  flightChannel,
  keyHashOf,
  lockLostChannel,
  nowMs,
  traced,
  type FlightTrace,
} from '../telemetry/channels.js';
import type { SingleFlightEvents } from '../types/events.js';
import { LockAdmission, type SingleFlightLock } from './admission.js';
import { LocalFlights } from './local-flights.js';
import { LockedRun, type FlightHooks } from './locked-run.js';
import { ReleaseWait } from './release-wait.js';
import { SharedResultStore } from './shared-result.js';
import { ThrottledLog } from './throttled-log.js';

/** The engine's flight across processes with hooks: for the cache. */
export const CROSS_PROCESS: unique symbol = Symbol('crossProcess');

/** The state of the engine's wake-up subscriber: for the health check. */
export const SUBSCRIBER_STATE: unique symbol = Symbol('subscriberState');

/**
 * Whether busy callers are woken by pub/sub now: `usable`, or `unusable` (they poll until a
 * subscription is confirmed again).
 *
 * @example
 * ```ts
 * if (details.subscriber === 'unusable') logger.warn('busy callers poll until pub/sub is back');
 * ```
 */
export type SubscriberState = 'usable' | 'unusable';

/**
 * Single flight across processes: for one key, one call in the whole system runs the work at a
 * time, and the others share its outcome. `@SingleFlight` runs through it in a Nest app; without
 * Nest, make one with `new` and `close()` it at shutdown.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock: new RedisLockService({ redis: () => new Redis() }) });
 * const report = await engine.run('report:1', () => buildReport(1), { share: true });
 * ```
 */
export class SingleFlightEngine extends EventEmitter<SingleFlightEvents> {
  private readonly lock: SingleFlightLock;
  private readonly settings: CallSettings;
  private readonly flights = new LocalFlights();
  private readonly admission: LockAdmission;
  private readonly runs: LockedRun;
  private readonly wait: ReleaseWait;
  private readonly traceKeys: boolean;
  private readonly messages: BufferLockMessages;
  private readonly log: ThrottledLog;
  private readonly shutdownTimeout: number;
  private closing: Promise<void> | undefined;

  constructor(parts: {
    readonly lock: RedisLockService;
    readonly options?: Partial<Omit<BufferLockOptions, 'redis'>>;
    readonly messages?: BufferLockMessages;
    /** The clock of the log's rate limit and of the breaker (ms since the epoch). */
    readonly now?: () => number;
  }) {
    super();
    const { lock, now } = parts;
    this.lock = lock;
    const messages = parts.messages ?? new BufferLockMessages();
    this.messages = messages;
    const options = resolveFlightOptions(parts.options, lock.ttl, messages);
    this.traceKeys = options.traceKeys;
    this.shutdownTimeout = options.shutdownTimeout;
    this.settings = new CallSettings(perCallSettings(options), messages);
    const log = new ThrottledLog(options.logger, messages, options.logInterval * 1000, now);
    this.log = log;
    const results = new SharedResultStore({ lock, serializer: options.serializer, messages });
    // The subscription fails in the background, where no caller sees it: the log is where it shows.
    this.wait = new ReleaseWait(
      () => lock.getClient(),
      (error) =>
        log.warn(
          'subscriber_failed',
          messages.render('subscriber_failed', { ERROR: error.message }),
        ),
    );
    this.admission = new LockAdmission({
      lock,
      wait: this.wait,
      results,
      messages,
      log,
      circuitBreaker: options.circuitBreaker,
      now,
      onBreakerChange: (state, previous) => {
        if (breakerChannel.hasSubscribers) breakerChannel.publish({ state, previous });
        try {
          this.emit('breaker', state, previous);
        } catch {
          // A listener's error is the listener's.
        }
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
          const { reason } = event;
          const keyHash = keyHashOf(event.key);
          lockLostChannel.publish(
            this.traceKeys ? { keyHash, key: event.cacheKey, reason } : { keyHash, reason },
          );
        }
        this.emit('lockLost', event);
        options.onLockLost?.(event);
      },
    });
  }

  get breaker():
    | { readonly state: 'closed' | 'open' | 'half-open'; readonly consecutiveFailures: number }
    | undefined {
    return this.admission.breaker;
  }

  /**
   * Shuts the engine down, at most the lock's `shutdownTimeout` (+ 1 s) after it is called: new
   * calls reject with a `LockError` `lock_closed`, and so does a call waiting for another
   * process's lock; calls under way finish, then the lock is closed (`RedisLockService.close()`:
   * every lock this process holds is released), and only then the breaker's watch and the wake-up
   * subscriber's connection. A build still running then is abandoned (`shutdown_abandoned`).
   */
  close(): Promise<void> {
    this.closing ??= this.shutDown();
    return this.closing;
  }

  private async shutDown(): Promise<void> {
    this.wait.end();
    await this.lock.close();
    const count = this.flights.size;
    if (count > 0) {
      const params = { COUNT: count, SECONDS: this.shutdownTimeout };
      this.log.warn('shutdown_abandoned', this.messages.render('shutdown_abandoned', params));
    }
    this.admission.close();
    this.wait.close();
  }

  get inFlight(): number {
    return this.flights.size;
  }

  /**
   * @internal `options` over the engine's defaults, complete (`run` takes them as they are);
   * throws a `BufferLockConfigError` for an invalid one.
   */
  settingsFor(options?: SingleFlightOptions | SingleFlightSettings): SingleFlightSettings {
    return this.settings.of(options);
  }

  /**
   * Runs `work` as the single flight of `cacheKey` and resolves to its value, or rejects with its
   * error; a caller that joined a flight in progress gets that flight's outcome. `'skip'` resolves
   * `undefined` without running it. An Observable that `work` returns holds the lock until it
   * completes, errors or is unsubscribed. With `share`, a caller of another worker gets the value
   * as it comes back through the serializer (`Stored<T>`).
   */
  run<T>(
    cacheKey: string,
    work: () => T,
    options?: SingleFlightOptions,
  ): Promise<Awaited<T> | Stored<Awaited<T>> | undefined> {
    let settings: SingleFlightSettings;
    try {
      if (this.closing) throw this.closed();
      settings = this.settingsFor(options);
    } catch (error) {
      return Promise.reject(error);
    }
    // A key that is no string is not a flight: acquire reports it in the catalog's words.
    if (typeof cacheKey !== 'string') return this.runs.promise(cacheKey, undefined, work, settings);
    const redisKey = this.lock.redisKey(cacheKey);
    // Nobody listens: no trace object, no wrapping promise (a measurable share of a fast call).
    const trace = flightChannel.hasSubscribers ? this.traceOf(cacheKey, redisKey) : undefined;
    const flight = (): Promise<Awaited<T> | undefined> => {
      const existing = this.flights.promise<Awaited<T> | undefined>(redisKey);
      if (!existing) {
        return this.flights.startPromise(redisKey, () =>
          this.runs.promise(cacheKey, redisKey, work, settings, undefined, trace),
        );
      }
      if (trace) trace.role = 'waiter';
      if (settings.onBusy === 'skip') {
        if (trace) trace.outcome = 'skipped';
        return Promise.resolve(undefined);
      }
      if (settings.onBusy === 'throw') return Promise.reject(this.admission.busy(cacheKey));
      if (!trace) return existing;
      const started = nowMs();
      return existing.finally(() => {
        trace.waitMs = nowMs() - started;
      });
    };
    return trace ? traced(flightChannel, trace, flight) : flight();
  }

  /**
   * The Observable form of `run`: nothing happens until subscription. Overlapping subscriptions
   * for `cacheKey` in this process are one flight that replays what it emitted so far; the lock
   * is held until it completes, errors, or every subscriber has unsubscribed. Results are never
   * shared across processes.
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
    options?: SingleFlightOptions,
  ): Observable<T | undefined> {
    return defer((): Observable<T | undefined> => {
      if (this.closing) throw this.closed();
      const settings = { ...this.settingsFor(options), share: false };
      // A key that is no string is not a flight: acquire reports it in the catalog's words.
      if (typeof cacheKey !== 'string') {
        return this.runs.observable(cacheKey, undefined, work, settings);
      }
      const redisKey = this.lock.redisKey(cacheKey);
      const trace = flightChannel.hasSubscribers ? this.traceOf(cacheKey, redisKey) : undefined;
      const started = trace ? nowMs() : 0;
      if (trace) flightChannel.start.publish(trace);
      let stream: Observable<T | undefined>;
      const existing = this.flights.stream<T | undefined>(redisKey);
      if (!existing) {
        const source = this.runs.observable(cacheKey, redisKey, work, settings, trace);
        stream = this.flights.startStream(redisKey, source);
      } else {
        if (trace) trace.role = 'waiter';
        if (trace && settings.onBusy === 'skip') trace.outcome = 'skipped';
        stream =
          settings.onBusy === 'skip'
            ? of(undefined)
            : settings.onBusy === 'throw'
              ? throwError(() => this.admission.busy(cacheKey))
              : existing;
      }
      if (!trace) return stream;
      flightChannel.end.publish(trace);
      return stream.pipe(
        tap({
          error: (error: unknown) => {
            trace.outcome = 'error';
            trace.error = error;
            flightChannel.error.publish(trace);
          },
        }),
        finalize(() => {
          // The lock is let go as this subscription ends: the hold runs until now.
          if (trace.locked) trace.holdMs = nowMs() - started - trace.waitMs!;
          if (trace.role === 'waiter') trace.waitMs ??= nowMs() - started;
          trace.outcome ??= 'ok';
          flightChannel.asyncStart.publish(trace);
          flightChannel.asyncEnd.publish(trace);
        }),
      );
    });
  }

  /** @internal One flight across processes with `hooks`, no in-process one (the cache has its own). */
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

  /** @internal */
  async [SUBSCRIBER_STATE](): Promise<SubscriberState> {
    return (await this.wait.subscriberUsable()) ? 'usable' : 'unusable';
  }

  private closed(): LockError {
    return new LockError('lock_closed', this.messages.render('lock_closed'));
  }

  private traceOf(cacheKey: string, redisKey: string): FlightTrace {
    const keyHash = keyHashOf(redisKey);
    return this.traceKeys ? { keyHash, key: cacheKey } : { keyHash };
  }
}
