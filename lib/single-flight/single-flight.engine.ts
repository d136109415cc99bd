import { Logger, type LoggerService } from '@nestjs/common';
import { EventEmitter } from 'node:events';
import {
  defer,
  finalize,
  isObservable,
  Observable,
  of,
  ReplaySubject,
  share,
  tap,
  throwError,
  type Subscription,
} from 'rxjs';
import { LockBusyError } from '../errors/lock-busy.error.js';
import { LockError } from '../errors/lock.error.js';
import { RedisUnavailableError } from '../errors/redis-unavailable.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import {
  BUFFER_LOCK_DEFAULTS,
  type CircuitBreakerSettings,
  type OnBusy,
  type OnRedisError,
} from '../options/buffer-lock.options.js';
import { SharedResultStore } from '../redis/shared-result.js';
import type { AcquireResult, LockGuard, RedisLockService } from '../redis-lock.service.js';
import type { ResultSerializer } from '../serialization/result-serializer.js';
import { CIRCUIT_BREAKER_DEFAULTS, CircuitBreaker, type CircuitState } from './circuit-breaker.js';
import { runInFlight, type FlightContext } from './flight-context.js';
import { PubSubWaitStrategy } from './pubsub-wait.strategy.js';
import { ThrottledLog } from './throttled-log.js';
import type { WaitStrategy } from './wait-strategy.js';
import { LockWatchdog, type LockLostEvent } from './watchdog.js';

/**
 * How one single-flight call behaves. Each field defaults to the engine's `defaults`.
 *
 * @example
 * ```ts
 * const settings: SingleFlightSettings = {
 *   ttl: 30, lockTimeout: 10, onBusy: 'wait', share: true, onRedisError: 'proceed',
 * };
 * ```
 */
export interface SingleFlightSettings {
  /** Seconds the lock lives in Redis (the watchdog extends it while the work runs). */
  readonly ttl: number;
  /** Seconds a `'wait'` caller waits before it runs without the lock. */
  readonly lockTimeout: number;
  /** What to do when another holder has the lock. */
  readonly onBusy: OnBusy;
  /** Share the leader's result with waiters in other processes (they do not run the work). */
  readonly share: boolean;
  /** What to do when Redis cannot be asked: run without the lock, or throw. */
  readonly onRedisError: OnRedisError;
  /** Seconds the lock may be held in all while the work runs; `undefined`: no cap. */
  readonly maxHold?: number;
}

/**
 * What the engine needs from a lock: `RedisLockService` has it. A small interface so that the
 * engine is testable, and so that a subclass (a Cluster hash tag in `key()`) plugs in unchanged.
 *
 * @example
 * ```ts
 * const lock: SingleFlightLock = new RedisLockService({ redis: () => new Redis() });
 * ```
 */
export type SingleFlightLock = Pick<
  RedisLockService,
  'acquire' | 'release' | 'extend' | 'redisKey' | 'ttl' | 'getClient'
>;

/**
 * The engine's `'lockLost'` event: the watchdog's {@link LockLostEvent} plus the cache key.
 *
 * @example
 * ```ts
 * engine.on('lockLost', (event: FlightLockLostEvent) => metrics.increment(event.reason));
 * ```
 */
export interface FlightLockLostEvent extends LockLostEvent {
  readonly cacheKey: string;
}

/**
 * The events a {@link SingleFlightEngine} emits.
 *
 * @example
 * ```ts
 * engine.on('breaker', (state: CircuitState) => console.log('breaker', state));
 * ```
 */
export interface SingleFlightEvents {
  /** A running method's lock was lost; its `SingleFlight.signal()` is aborted too. */
  lockLost: [FlightLockLostEvent];
  /** The circuit breaker changed state. */
  breaker: [state: CircuitState, previous: CircuitState];
}

/**
 * What a {@link SingleFlightEngine} is made of.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock, defaults: { lockTimeout: 5, share: true } });
 * ```
 */
export interface SingleFlightEngineOptions {
  readonly lock: SingleFlightLock;
  /** Per-call defaults; missing fields come from the lock's `ttl` and `BUFFER_LOCK_DEFAULTS`. */
  readonly defaults?: Partial<SingleFlightSettings>;
  /** How a busy `'wait'` caller learns that the holder may be done. Default: pub/sub wake-up. */
  readonly waitStrategy?: WaitStrategy;
  /** How shared results are written (`share: true`). Default JSON. */
  readonly serializer?: ResultSerializer;
  /** The breaker's numbers, or `false` for none. Default `CIRCUIT_BREAKER_DEFAULTS`. */
  readonly circuitBreaker?: CircuitBreakerSettings;
  /** Called when a running method's lock was lost (besides the `'lockLost'` event). */
  readonly onLockLost?: (event: FlightLockLostEvent) => void;
  readonly messages?: BufferLockMessages;
  /** Default `new Logger('BufferLock')`. */
  readonly logger?: LoggerService;
  /** Seconds between two log lines with the same message id. Default `BUFFER_LOCK_DEFAULTS`. */
  readonly logInterval?: number;
  /** The clock of the log's rate limit and of the breaker (ms since the epoch). */
  readonly now?: () => number;
}

/**
 * How a call was let in by {@link SingleFlightEngine.admit}: holding the lock, without it (Redis
 * trouble, the breaker open, or `lockTimeout` passed), with the result another process's leader
 * shared (`share: true`), or not at all (`'skip'`).
 *
 * @example
 * ```ts
 * const admission = await engine.admit('report:1', engine.settle({ onBusy: 'skip' }));
 * if (admission.kind === 'locked') console.log(admission.guard.key);
 * ```
 */
export type Admission =
  | { readonly kind: 'locked'; readonly guard: LockGuard }
  | { readonly kind: 'unlocked'; readonly reason: 'redis-error' | 'breaker-open' | 'timeout' }
  | { readonly kind: 'shared'; readonly value: unknown }
  | { readonly kind: 'skipped' };

/** Errors of `acquire` that mean Redis could not be asked (they count for the breaker). */
const REDIS_FAILURES: ReadonlySet<string> = new Set([
  'redis_lock_failed',
  'redis_no_client',
  'redis_no_result',
]);

/** The signal of work that runs without the lock: nothing can be lost, so it never aborts. */
const NEVER_ABORTED: AbortSignal = new AbortController().signal;

/**
 * Single flight across processes: for one key, one call in the whole system runs the work at a
 * time, and the others share its outcome.
 *
 * - In one process, concurrent calls for a key are one flight (like Go's `singleflight.Do`): the
 *   first is the leader, the rest get the leader's promise (value and error alike) and never
 *   touch Redis. `'skip'` and `'throw'` callers that find a flight in progress skip or throw.
 *   {@link runObservable} does the same for subscriptions: they share one subscription to the
 *   work, and a late one is replayed every value emitted so far.
 * - Across processes, the leader takes the Redis lock; the other processes' leaders wait for it
 *   to be released (wake-up by pub/sub, PTTL backstop), then try again. With `share: true` the
 *   lock holder stores its serialized result and releases in one script, and a woken waiter
 *   returns that result without running the work.
 * - While the work runs, a watchdog extends the lock every ttl/3 (up to `maxHold`); a lost lock
 *   emits `'lockLost'`, logs, and aborts the work's `signal` ({@link currentFlight}).
 * - Redis trouble is logged (rate limited) and the work runs without a cross-worker lock
 *   (`onRedisError: 'proceed'`, the spec's fail-open) or the call rejects with a
 *   {@link RedisUnavailableError} (`'throw'`). After `failureThreshold` failures in a row the
 *   circuit breaker skips Redis for `openSeconds`, then lets one probe through.
 *
 * Plain class: `@SingleFlight` uses it through Nest, tests and scripts with `new`. The steps are
 * public ({@link settle}, {@link admit}, {@link leave}) so that features can be layered on.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock: new RedisLockService({ redis: () => new Redis() }) });
 * const report = await engine.run('report:1', () => buildReport(1), { share: true });
 * ```
 */
export class SingleFlightEngine extends EventEmitter<SingleFlightEvents> {
  readonly defaults: SingleFlightSettings;
  /** The circuit breaker in front of Redis, if any. */
  readonly breaker: CircuitBreaker | undefined;
  protected readonly lock: SingleFlightLock;
  protected readonly waitStrategy: WaitStrategy;
  protected readonly messages: BufferLockMessages;
  protected readonly log: ThrottledLog;
  protected readonly results: SharedResultStore;
  /** The flights in progress in this process, by Redis key. */
  private readonly flights = new Map<string, { promise?: Promise<unknown> }>();
  /** The Observable flights ({@link runObservable}) in progress in this process, by Redis key. */
  private readonly streams = new Map<string, Observable<unknown>>();

  constructor(private readonly options: SingleFlightEngineOptions) {
    super();
    this.lock = options.lock;
    const builtIn: SingleFlightSettings = {
      ttl: options.lock.ttl,
      lockTimeout: BUFFER_LOCK_DEFAULTS.lockTimeout,
      onBusy: BUFFER_LOCK_DEFAULTS.onBusy,
      share: BUFFER_LOCK_DEFAULTS.share,
      onRedisError: BUFFER_LOCK_DEFAULTS.onRedisError,
    };
    this.defaults = over(builtIn, options.defaults);
    const client = () => this.lock.getClient();
    this.waitStrategy = options.waitStrategy ?? new PubSubWaitStrategy({ client });
    this.messages = options.messages ?? new BufferLockMessages();
    this.log = new ThrottledLog(
      options.logger ?? new Logger('BufferLock'),
      this.messages,
      (options.logInterval ?? BUFFER_LOCK_DEFAULTS.logInterval) * 1000,
      options.now,
    );
    this.results = new SharedResultStore({
      client,
      serializer: options.serializer,
      messages: this.messages,
    });
    const breaker = options.circuitBreaker ?? BUFFER_LOCK_DEFAULTS.circuitBreaker;
    this.breaker =
      breaker === false
        ? undefined
        : new CircuitBreaker({
            ...breaker,
            now: options.now,
            onStateChange: (state, previous) => this.breakerMoved(state, previous),
          });
  }

  /** How many keys have a flight in progress in this process (for tests and diagnostics). */
  get inFlight(): number {
    return this.flights.size + this.streams.size;
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
    settings?: Partial<SingleFlightSettings>,
  ): Promise<Awaited<T> | undefined> {
    const settled = this.settle(settings);
    // A key that is no string is not a flight: acquire reports it in the catalog's words.
    if (typeof cacheKey !== 'string') return this.lead(cacheKey, work, settled);
    const redisKey = this.lock.redisKey(cacheKey);
    const existing = this.flights.get(redisKey);
    if (existing) {
      if (settled.onBusy === 'skip') return Promise.resolve(undefined);
      if (settled.onBusy === 'throw') return Promise.reject(this.busy(cacheKey));
      return existing.promise as Promise<Awaited<T> | undefined>;
    }
    const entry: { promise?: Promise<unknown> } = {};
    this.flights.set(redisKey, entry);
    // Forgotten before the outcome reaches anyone: a call after it starts a new flight.
    const forget = (): void => {
      if (this.flights.get(redisKey) === entry) this.flights.delete(redisKey);
    };
    const promise = this.lead(cacheKey, work, settled).then(
      (value) => {
        forget();
        return value;
      },
      (error: unknown) => {
        forget();
        throw error;
      },
    );
    entry.promise = promise;
    return promise;
  }

  /**
   * The Observable form of {@link run}: nothing happens until subscription. In this process,
   * subscriptions for `cacheKey` that overlap are one flight: the first takes the lock and
   * subscribes to `work()` once; the others join it, get every value emitted so far (replayed)
   * and then the rest, and share its completion or error, without touching Redis. The lock is held
   * (and watched) until that one subscription to `work()` completes, errors, or every subscriber
   * has unsubscribed; a subscription after that starts a new flight. A `'skip'` subscriber that
   * finds the key busy (here or in another process) emits `undefined` and completes; `'throw'`
   * errors with {@link LockBusyError}. The settings of the flight's first subscriber apply.
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
    settings?: Partial<SingleFlightSettings>,
  ): Observable<T | undefined> {
    return defer((): Observable<T | undefined> => {
      const settled = this.settle({ ...settings, share: false });
      // A key that is no string is not a flight: acquire reports it in the catalog's words.
      if (typeof cacheKey !== 'string') return this.observe(cacheKey, work, settled);
      const redisKey = this.lock.redisKey(cacheKey);
      const existing = this.streams.get(redisKey) as Observable<T | undefined> | undefined;
      if (existing) {
        if (settled.onBusy === 'skip') return of(undefined);
        if (settled.onBusy === 'throw') return throwError(() => this.busy(cacheKey));
        return existing;
      }
      // Forgotten before the end reaches any subscriber: one that subscribes then starts anew.
      const forget = (): void => {
        if (this.streams.get(redisKey) === flight) this.streams.delete(redisKey);
      };
      const flight: Observable<T | undefined> = this.observe(cacheKey, work, settled).pipe(
        tap({ complete: forget, error: forget, finalize: forget }),
        share({
          connector: () => new ReplaySubject<T | undefined>(),
          resetOnComplete: true,
          resetOnError: true,
          resetOnRefCountZero: true,
        }),
      );
      this.streams.set(redisKey, flight);
      return flight;
    });
  }

  /** `settings` over the engine's defaults. */
  settle(settings?: Partial<SingleFlightSettings>): SingleFlightSettings {
    return over(this.defaults, settings);
  }

  /**
   * Decides how a call may proceed: takes the lock, or (busy) waits, skips or throws
   * {@link LockBusyError} as `settings.onBusy` says. A `'wait'` caller that is woken reads the
   * shared result first when `settings.share` is on. Redis trouble (or an open breaker) gives
   * `'unlocked'` and a log line, or, with `onRedisError: 'throw'`, a {@link RedisUnavailableError}.
   * Rejects with nothing else.
   */
  async admit(cacheKey: string, settings: SingleFlightSettings): Promise<Admission> {
    const deadline = Date.now() + settings.lockTimeout * 1000;
    for (let first = true; ; first = false) {
      if (!first) {
        // Only after a busy answer, so the key is known to be valid.
        const redisKey = this.lock.redisKey(cacheKey);
        await this.waitStrategy.waitForRelease(redisKey, deadline);
        if (settings.share) {
          const found = await this.results.read(redisKey, cacheKey);
          if (found.status === 'hit') return { kind: 'shared', value: found.value };
          if (found.status === 'error') this.log.warn(found.error.code, found.error.message);
        }
      }
      const [guard, error] =
        this.breaker?.allow() === false
          ? this.breakerSkip(cacheKey)
          : this.tally(await this.lock.acquire(cacheKey, settings.ttl));
      if (guard) return { kind: 'locked', guard };
      if (error) return this.redisTrouble(cacheKey, settings, error);
      if (settings.onBusy === 'skip') return { kind: 'skipped' };
      if (settings.onBusy === 'throw') throw this.busy(cacheKey);
      if (Date.now() >= deadline) {
        const line = this.messages.render('lock_wait_timeout', {
          SECONDS: settings.lockTimeout,
          KEY: cacheKey,
        });
        this.log.warn('lock_wait_timeout', line);
        return { kind: 'unlocked', reason: 'timeout' };
      }
    }
  }

  /**
   * Releases a held lock. A failed release is logged, never thrown: the TTL expires the lock.
   */
  leave(admission: Admission): Promise<void> {
    if (admission.kind !== 'locked') return Promise.resolve();
    return this.lock.release(admission.guard).then(([, error]) => {
      if (error) this.redisFailed(error);
    });
  }

  /**
   * One subscription is one call: admitted on subscription, it subscribes to `work()` holding the
   * lock (under the watchdog) and releases when that completes, errors or is unsubscribed.
   */
  protected observe<T>(
    cacheKey: string,
    work: () => Observable<T>,
    settings: SingleFlightSettings,
  ): Observable<T | undefined> {
    return new Observable<T | undefined>((subscriber) => {
      let inner: Subscription | undefined;
      const run = async (): Promise<void> => {
        const admission = await this.admit(cacheKey, settings);
        if (subscriber.closed) return void this.leave(admission);
        if (admission.kind === 'skipped' || admission.kind === 'shared') {
          subscriber.next(undefined);
          return subscriber.complete();
        }
        const { context, done } = this.contextOf(cacheKey, admission, settings);
        let source: Observable<T>;
        try {
          source = runInFlight(context, work);
        } catch (error) {
          done();
          void this.leave(admission);
          return subscriber.error(error);
        }
        inner = source
          .pipe(
            finalize(() => {
              done();
              void this.leave(admission);
            }),
          )
          .subscribe(subscriber);
      };
      run().catch((error: unknown) => subscriber.error(error));
      return () => inner?.unsubscribe();
    });
  }

  /** The leader of a flight: admitted, it runs the work (or returns the shared result). */
  protected async lead<T>(
    cacheKey: string,
    work: () => T,
    settings: SingleFlightSettings,
  ): Promise<Awaited<T> | undefined> {
    const admission = await this.admit(cacheKey, settings);
    switch (admission.kind) {
      case 'skipped':
        return undefined;
      case 'shared':
        return admission.value as Awaited<T>;
      case 'unlocked':
        return await runInFlight(this.contextOf(cacheKey, admission).context, work);
      case 'locked':
        return await this.runLocked(cacheKey, admission.guard, work, settings);
    }
  }

  /** Runs `work` holding the lock, under the watchdog; shares and releases when it settles. */
  protected async runLocked<T>(
    cacheKey: string,
    guard: LockGuard,
    work: () => T,
    settings: SingleFlightSettings,
  ): Promise<Awaited<T>> {
    const admission: Admission = { kind: 'locked', guard };
    const { context, done } = this.contextOf(cacheKey, admission, settings);
    let value: Awaited<T>;
    try {
      const returned = runInFlight(context, work);
      // A plain value is not awaited: one microtask turn and promise less per call.
      value = isPromiseLike(returned) ? await returned : (returned as Awaited<T>);
    } catch (error) {
      done();
      await this.release(guard, settings);
      throw error;
    }
    if (isObservable(value) && !settings.share) {
      return value.pipe(
        finalize(() => {
          done();
          void this.leave(admission);
        }),
      ) as Awaited<T>;
    }
    if (!settings.share) {
      done();
      await this.leave(admission);
      return value;
    }
    let payload: string;
    try {
      payload = this.results.serialize(value, cacheKey);
    } catch (error) {
      done();
      await this.release(guard, settings);
      throw error;
    }
    done();
    const [, error] = await this.results.storeAndRelease(guard, payload, settings.lockTimeout);
    if (error) this.redisFailed(error);
    return value;
  }

  /** Releases without sharing; with `share` on, also removes an older result (nothing to share). */
  private async release(guard: LockGuard, settings: SingleFlightSettings): Promise<void> {
    if (!settings.share) return this.leave({ kind: 'locked', guard });
    const [, error] = await this.results.storeAndRelease(guard, undefined);
    if (error) this.redisFailed(error);
  }

  /** The work's {@link FlightContext}; a held lock gets a watchdog, stopped by `done()`. */
  private contextOf(
    cacheKey: string,
    admission: Admission,
    settings: Pick<SingleFlightSettings, 'ttl' | 'maxHold'> = this.defaults,
  ): { context: FlightContext; done: () => void } {
    if (admission.kind !== 'locked') {
      return {
        context: { cacheKey, locked: false, signal: NEVER_ABORTED, fence: undefined },
        done: () => {},
      };
    }
    const watchdog = new LockWatchdog({
      lock: this.lock,
      guard: admission.guard,
      ttl: settings.ttl,
      maxHold: settings.maxHold,
      onLockLost: (event) => this.lockLost({ ...event, cacheKey }),
    }).start();
    return {
      context: {
        cacheKey,
        locked: true,
        // Read when the work asks for it (SingleFlight.signal()), not made for every call.
        get signal() {
          return watchdog.signal;
        },
        fence: admission.guard.fence,
      },
      done: () => watchdog.stop(),
    };
  }

  /** What `acquire` gives while the breaker is open: Redis is not asked. */
  private breakerSkip(cacheKey: string): AcquireResult {
    const text = this.messages.render('lock_breaker_skip', { KEY: cacheKey });
    return [undefined, new LockError('lock_breaker_skip', text)];
  }

  /** Tells the breaker how an acquire went: answered, or Redis could not be asked. */
  private tally(result: AcquireResult): AcquireResult {
    const [, error] = result;
    if (!error) this.breaker?.success();
    else if (REDIS_FAILURES.has(error.code)) this.breaker?.failure();
    return result;
  }

  /** Redis could not be asked: fail open (logged), or throw, as `onRedisError` says. */
  private redisTrouble(
    cacheKey: string,
    settings: SingleFlightSettings,
    error: LockError,
  ): Admission {
    const skipped = error.code === 'lock_breaker_skip';
    if (settings.onRedisError === 'throw') {
      // Bad input (a key that is no string, an invalid ttl) is the caller's error, not Redis's.
      if (!skipped && !REDIS_FAILURES.has(error.code)) throw error;
      if (!skipped) this.log.error(error.code, error.message);
      throw new RedisUnavailableError(this.messages.render('redis_unavailable'), error, cacheKey);
    }
    if (skipped) {
      this.log.warn('lock_breaker_skip', error.message);
      return { kind: 'unlocked', reason: 'breaker-open' };
    }
    const line = this.messages.render('lock_fail_open', { ERROR: error.message, KEY: cacheKey });
    this.log.error('lock_fail_open', line);
    return { kind: 'unlocked', reason: 'redis-error' };
  }

  /** A release or shared-result write that Redis did not answer: logged, counted. */
  private redisFailed(error: LockError): void {
    this.log.warn(error.code, error.message);
    if (REDIS_FAILURES.has(error.code) || error.cause !== undefined) this.breaker?.failure();
  }

  private lockLost(event: FlightLockLostEvent): void {
    const line = this.messages.render('lock_lost', { KEY: event.cacheKey, REASON: event.reason });
    this.log.warn('lock_lost', line);
    this.emit('lockLost', event);
    this.options.onLockLost?.(event);
  }

  private breakerMoved(state: CircuitState, previous: CircuitState): void {
    if (state === 'open') {
      const line = this.messages.render('lock_breaker_open', {
        FAILURES: this.breaker?.consecutiveFailures ?? 0,
        SECONDS:
          (this.options.circuitBreaker || undefined)?.openSeconds ??
          CIRCUIT_BREAKER_DEFAULTS.openSeconds,
      });
      this.log.error('lock_breaker_open', line);
    } else if (state === 'closed') {
      this.log.log('lock_breaker_closed', this.messages.render('lock_breaker_closed'));
    }
    try {
      this.emit('breaker', state, previous);
    } catch {
      // A listener's error is the listener's.
    }
  }

  private busy(cacheKey: string): LockBusyError {
    return new LockBusyError(this.messages.render('lock_busy'), cacheKey);
  }
}

const given = <V>(value: V | undefined, fallback: V): V => (value === undefined ? fallback : value);

/**
 * `settings` over `defaults`, field by field: a field left `undefined` takes the default (only
 * then: a `null` is the caller's to explain). It runs on every call, so no spread of filtered
 * entries.
 */
function over(
  defaults: SingleFlightSettings,
  settings: Partial<SingleFlightSettings> = {},
): SingleFlightSettings {
  return {
    ttl: given(settings.ttl, defaults.ttl),
    lockTimeout: given(settings.lockTimeout, defaults.lockTimeout),
    onBusy: given(settings.onBusy, defaults.onBusy),
    share: given(settings.share, defaults.share),
    onRedisError: given(settings.onRedisError, defaults.onRedisError),
    maxHold: given(settings.maxHold, defaults.maxHold),
  };
}

const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  (typeof value === 'object' || typeof value === 'function') &&
  value !== null &&
  typeof (value as { then?: unknown }).then === 'function';
