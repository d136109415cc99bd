import { Logger, type LoggerService } from '@nestjs/common';
import { finalize, isObservable, Observable, type Subscription } from 'rxjs';
import { LockBusyError } from '../errors/lock-busy.error.js';
import type { LockError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { BUFFER_LOCK_DEFAULTS, type OnBusy } from '../options/buffer-lock.options.js';
import type { LockGuard, RedisLockService } from '../redis-lock.service.js';
import { LocalTurns } from './local-turns.js';
import { PollingWaitStrategy } from './polling-wait.strategy.js';
import { ThrottledLog } from './throttled-log.js';
import type { WaitStrategy } from './wait-strategy.js';

/**
 * How one single-flight call behaves. Each field defaults to the engine's `defaults`.
 *
 * @example
 * ```ts
 * const settings: SingleFlightSettings = { ttl: 30, lockTimeout: 10, onBusy: 'wait' };
 * ```
 */
export interface SingleFlightSettings {
  /** Seconds the lock lives in Redis. */
  readonly ttl: number;
  /** Seconds a `'wait'` caller waits before it runs without the lock. */
  readonly lockTimeout: number;
  /** What to do when another holder has the lock. */
  readonly onBusy: OnBusy;
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
export type SingleFlightLock = Pick<RedisLockService, 'acquire' | 'release' | 'redisKey' | 'ttl'>;

/**
 * What a {@link SingleFlightEngine} is made of.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock, defaults: { lockTimeout: 5 } });
 * ```
 */
export interface SingleFlightEngineOptions {
  readonly lock: SingleFlightLock;
  /** Per-call defaults; missing fields come from the lock's `ttl` and `BUFFER_LOCK_DEFAULTS`. */
  readonly defaults?: Partial<SingleFlightSettings>;
  /** How a busy `'wait'` caller learns that the holder may be done. Default: polling. */
  readonly waitStrategy?: WaitStrategy;
  readonly messages?: BufferLockMessages;
  /** Default `new Logger('BufferLock')`. */
  readonly logger?: LoggerService;
  /** Seconds between two log lines with the same message id. Default `BUFFER_LOCK_DEFAULTS`. */
  readonly logInterval?: number;
  /** The clock of the log's rate limit (ms since the epoch). */
  readonly now?: () => number;
}

/**
 * How a call was let in by {@link SingleFlightEngine.admit}: holding the lock, without it
 * (Redis trouble, or `lockTimeout` passed), or not at all (`'skip'`).
 *
 * @example
 * ```ts
 * const admission = await engine.admit('report:1', engine.settle({ onBusy: 'skip' }));
 * if (admission.kind === 'locked') console.log(admission.guard.key);
 * ```
 */
export type Admission =
  | { readonly kind: 'locked'; readonly guard: LockGuard }
  | { readonly kind: 'unlocked'; readonly reason: 'redis-error' | 'timeout' }
  | { readonly kind: 'skipped' };

/**
 * Runs a function under a lock so that, across every worker sharing one Redis, only one runs it
 * for a given key at a time. The rest wait for it (then run the function, which normally finds
 * what the holder cached), skip, or get a {@link LockBusyError}. Redis trouble is logged, rate
 * limited, and the function runs without a cross-worker lock (fail-open), as the spec's plugin
 * does. Plain class: `@SingleFlight` uses it through Nest, tests and scripts with `new`.
 *
 * The steps are public so that features can be layered on without a fork: {@link settle} fills in
 * defaults, {@link admit} decides how a call may proceed (acquiring, waiting, skipping, throwing),
 * {@link leave} releases. {@link run} and {@link runObservable} compose them.
 *
 * @example
 * ```ts
 * const engine = new SingleFlightEngine({ lock: new RedisLockService({ redis: () => new Redis() }) });
 * const report = await engine.run('report:1', async () => {
 *   return (await cache.get('report:1')) ?? (await buildAndCache('report:1'));
 * });
 * ```
 */
export class SingleFlightEngine {
  readonly defaults: SingleFlightSettings;
  protected readonly lock: SingleFlightLock;
  protected readonly waitStrategy: WaitStrategy;
  protected readonly messages: BufferLockMessages;
  protected readonly log: ThrottledLog;
  /** Waiting callers of one key take turns in this process; only the one in turn asks Redis. */
  protected readonly turns = new LocalTurns();
  private readonly passOn = new WeakMap<Admission, () => void>();

  constructor(options: SingleFlightEngineOptions) {
    this.lock = options.lock;
    this.defaults = {
      ttl: options.lock.ttl,
      lockTimeout: BUFFER_LOCK_DEFAULTS.lockTimeout,
      onBusy: BUFFER_LOCK_DEFAULTS.onBusy,
      ...withoutUndefined(options.defaults ?? {}),
    };
    this.waitStrategy = options.waitStrategy ?? new PollingWaitStrategy();
    this.messages = options.messages ?? new BufferLockMessages();
    this.log = new ThrottledLog(
      options.logger ?? new Logger('BufferLock'),
      this.messages,
      (options.logInterval ?? BUFFER_LOCK_DEFAULTS.logInterval) * 1000,
      options.now,
    );
  }

  /**
   * Runs `work` under the lock on `cacheKey` and resolves to its value, or rejects with its error,
   * unchanged. The lock is released when `work` settles (also when it throws); `'skip'` resolves
   * `undefined` without running it. If `work` returns an Observable while the lock is held, the
   * lock is held until that Observable completes, errors or is unsubscribed.
   */
  async run<T>(
    cacheKey: string,
    work: () => T,
    settings?: Partial<SingleFlightSettings>,
  ): Promise<Awaited<T> | undefined> {
    const admission = await this.admit(cacheKey, this.settle(settings));
    if (admission.kind === 'skipped') return undefined;
    let handedOver = false;
    try {
      const value = await work();
      if (admission.kind === 'locked' && isObservable(value)) {
        handedOver = true;
        return value.pipe(finalize(() => void this.leave(admission))) as Awaited<T>;
      }
      return value;
    } finally {
      if (!handedOver) await this.leave(admission);
    }
  }

  /**
   * The Observable form of {@link run}: nothing happens until subscription; then the lock is
   * taken, `work()` is subscribed to, and the lock is held until it completes, errors or is
   * unsubscribed. `'skip'` emits `undefined` and completes; `'throw'` errors with
   * {@link LockBusyError}.
   */
  runObservable<T>(
    cacheKey: string,
    work: () => Observable<T>,
    settings?: Partial<SingleFlightSettings>,
  ): Observable<T | undefined> {
    return new Observable<T | undefined>((subscriber) => {
      let inner: Subscription | undefined;
      this.admit(cacheKey, this.settle(settings)).then(
        (admission) => {
          if (subscriber.closed) return void this.leave(admission);
          if (admission.kind === 'skipped') {
            subscriber.next(undefined);
            return subscriber.complete();
          }
          let source: Observable<T>;
          try {
            source = work();
          } catch (error) {
            void this.leave(admission);
            return subscriber.error(error);
          }
          inner = source.pipe(finalize(() => void this.leave(admission))).subscribe(subscriber);
        },
        (error: unknown) => subscriber.error(error),
      );
      return () => inner?.unsubscribe();
    });
  }

  /** `settings` over the engine's defaults. */
  settle(settings: Partial<SingleFlightSettings> = {}): SingleFlightSettings {
    return { ...this.defaults, ...withoutUndefined(settings) };
  }

  /**
   * Decides how a call may proceed: takes the lock, or (busy) waits, skips or throws
   * {@link LockBusyError} as `settings.onBusy` says. Redis trouble gives `'unlocked'` and a log
   * line. Never rejects except with `LockBusyError`. `'wait'` callers of one key in this process
   * first take turns among themselves, so only one of them at a time asks Redis.
   */
  async admit(cacheKey: string, settings: SingleFlightSettings): Promise<Admission> {
    if (settings.onBusy !== 'wait') return this.tryOnce(cacheKey, settings);
    const deadline = Date.now() + settings.lockTimeout * 1000;
    const passOn = await this.turns.take(this.lock.redisKey(cacheKey), deadline);
    try {
      const admission = await this.acquireOrWait(cacheKey, settings, deadline);
      this.passOn.set(admission, passOn);
      return admission;
    } catch (error) {
      passOn();
      throw error;
    }
  }

  /**
   * Releases a held lock, then lets the next local caller of the key go. A failed release is
   * logged, never thrown: the TTL expires the lock.
   */
  async leave(admission: Admission): Promise<void> {
    try {
      if (admission.kind !== 'locked') return;
      const [, error] = await this.lock.release(admission.guard);
      if (error) this.log.warn(error.code, error.message);
    } finally {
      this.passOn.get(admission)?.();
      this.passOn.delete(admission);
    }
  }

  /** `'skip'` and `'throw'`: one try, no waiting. */
  protected async tryOnce(cacheKey: string, settings: SingleFlightSettings): Promise<Admission> {
    const [guard, error] = await this.lock.acquire(cacheKey, settings.ttl);
    if (guard) return { kind: 'locked', guard };
    if (error) return this.failOpen(cacheKey, error);
    if (settings.onBusy === 'skip') return { kind: 'skipped' };
    throw new LockBusyError(this.messages.render('lock_busy'), cacheKey);
  }

  /** `'wait'`: take the lock, or try again each time the wait strategy says it may be free. */
  protected async acquireOrWait(
    cacheKey: string,
    settings: SingleFlightSettings,
    deadline: number,
  ): Promise<Admission> {
    const redisKey = this.lock.redisKey(cacheKey);
    for (let first = true; ; first = false) {
      if (!first) await this.waitStrategy.waitForRelease(redisKey, deadline);
      const [guard, error] = await this.lock.acquire(cacheKey, settings.ttl);
      if (guard) return { kind: 'locked', guard };
      if (error) return this.failOpen(cacheKey, error);
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

  /** The spec's plugin: log the error and go on without a cross-worker lock. */
  protected failOpen(cacheKey: string, error: LockError): Admission {
    const line = this.messages.render('lock_fail_open', { ERROR: error.message, KEY: cacheKey });
    this.log.error('lock_fail_open', line);
    return { kind: 'unlocked', reason: 'redis-error' };
  }
}

function withoutUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(
    Object.entries(value).filter(([, field]) => field !== undefined),
  ) as Partial<T>;
}
