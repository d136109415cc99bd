import { LockBusyError } from '../errors/lock-busy.error.js';
import { LockError } from '../errors/lock.error.js';
import { RedisUnavailableError } from '../errors/redis-unavailable.error.js';
import { ACQUIRE_KEY, RELEASE_WRITING, type RedisLockService } from '../lock/redis-lock.service.js';
import type { AcquireResult, LockGuard } from '../lock/lock-results.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { SingleFlightSettings } from '../options/single-flight.options.js';
import type { CircuitBreakerSettings } from '../options/circuit-breaker.options.js';
import type { SharedResultStore } from './shared-result.js';
import { BreakerRecovery } from './breaker-recovery.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { type CircuitState } from '../types/events.js';
import type { ThrottledLog } from './throttled-log.js';
import { SILENT_MS, type ReleaseWait } from './release-wait.js';
import { errorText } from '../messages/error-text.js';

/** What single flight needs from a lock: a `RedisLockService` (or a subclass with its own `key()`). */
export type SingleFlightLock = Pick<
  RedisLockService,
  | 'acquire'
  | 'release'
  | 'extend'
  | 'redisKey'
  | 'ttl'
  | 'getClient'
  | 'close'
  | typeof ACQUIRE_KEY
  | typeof RELEASE_WRITING
>;

/** How a call was let in: holding the lock, without it, with a shared result, or not at all. */
export type Admission =
  | { readonly kind: 'locked'; readonly guard: LockGuard }
  | { readonly kind: 'unlocked'; readonly reason: 'redis-error' | 'breaker-open' | 'timeout' }
  | { readonly kind: 'shared'; readonly value: unknown }
  | { readonly kind: 'skipped' };

/** What another process's leader left for this call, found after a wake-up (or `carried` by it). */
export type Peek = (carried?: string) => Promise<{ readonly value: unknown } | undefined>;

export interface AdmissionParts {
  readonly lock: SingleFlightLock;
  readonly wait: Pick<ReleaseWait, 'waitForRelease' | 'silence' | 'silentSince'>;
  readonly results: SharedResultStore;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly circuitBreaker: CircuitBreakerSettings;
  readonly now?: () => number;
  /** Told of every breaker state change, after it was logged. */
  readonly onBreakerChange: (state: CircuitState, previous: CircuitState) => void;
}

/** Errors of `acquire` that mean Redis could not be asked (they count for the breaker). */
const REDIS_FAILURES: ReadonlySet<string> = new Set([
  'redis_lock_failed',
  'redis_no_client',
  'redis_no_result',
]);

/** Whether a waiter whose next try failed with `error` waits on: Redis trouble, not bad input. */
const mayWaitOn = (error: LockError): boolean =>
  REDIS_FAILURES.has(error.code) || error.code === 'lock_breaker_skip';

/**
 * Admission to a flight across processes: take the lock, or (busy) wait, skip or throw as
 * `onBusy` says; when Redis cannot be asked, run without the lock or throw, behind a circuit
 * breaker that a client seen back (ready again, or answering a PING) half-opens early.
 */
export class LockAdmission {
  readonly breaker: CircuitBreaker | undefined;
  private readonly recovery: BreakerRecovery | undefined;
  /** Whether the breaker is half-open because Redis was seen back, before `openSeconds` ended. */
  private early = false;

  constructor(private readonly parts: AdmissionParts) {
    const settings = parts.circuitBreaker;
    this.breaker =
      settings === false
        ? undefined
        : new CircuitBreaker({
            ...settings,
            now: parts.now,
            onStateChange: (state, previous) => this.breakerMoved(state, previous, settings),
          });
    this.recovery =
      this.breaker === undefined
        ? undefined
        : new BreakerRecovery({
            client: () => parts.lock.getClient(),
            onBack: () => {
              if (this.breaker?.state !== 'open') return;
              this.early = true;
              this.breaker.recover();
            },
          });
  }

  close(): void {
    this.recovery?.close();
  }

  /**
   * Rejects only with a LockBusyError, a RedisUnavailableError, or for the caller's bad input.
   * `lockHeld`: the caller saw the lock held, so a waiting call waits before its first try;
   * `claimed`: the caller holds the lock already, and is let in with it.
   */
  async admit(
    cacheKey: string,
    redisKey: string | undefined,
    settings: SingleFlightSettings,
    peek?: Peek,
    lockHeld = false,
    claimed?: LockGuard,
  ): Promise<Admission> {
    const { lock, wait, results, log, messages } = this.parts;
    if (claimed) {
      // Redis answered the lookup that took it.
      this.breaker?.success();
      return { kind: 'locked', guard: claimed };
    }
    const deadline = Date.now() + settings.lockTimeout * 1000;
    const waitFirst = lockHeld && redisKey !== undefined && settings.onBusy === 'wait';
    for (let first = !waitFirst; ; first = false) {
      // A waiter waits on through Redis refusing (a restart), not through its silence (paused,
      // partitioned): a command left unanswered for SILENT_MS ends the wait as Redis trouble.
      if (!first) {
        const since = Date.now();
        // Only after a busy answer, so the key is known to be valid.
        const carried = await wait.waitForRelease(redisKey!, deadline);
        const silent = wait.silentSince(since);
        if (silent) return this.withoutRedis(cacheKey, settings, this.silenceError(silent));
        const left = await peek?.(carried);
        if (left) return { kind: 'shared', value: left.value };
        if (settings.share) {
          const reading = Date.now();
          const found = await results.read(redisKey!, cacheKey, carried);
          if (found.status === 'hit') return { kind: 'shared', value: found.value };
          if (found.status === 'error') {
            log.warn(found.error.code, found.error.message);
            if (Date.now() - reading >= SILENT_MS) {
              wait.silence(found.error);
              return this.withoutRedis(cacheKey, settings, this.silenceError(found.error));
            }
          }
        }
      }
      const asking = first ? 0 : Date.now();
      const [guard, error] =
        this.breaker?.allow() === false
          ? this.breakerSkip(cacheKey)
          : this.recordOutcome(
              await (redisKey === undefined
                ? lock.acquire(cacheKey, settings.ttl)
                : lock[ACQUIRE_KEY](redisKey, settings.ttl)),
            );
      // Shutting down: no new build, and no build without the lock either.
      if (error?.code === 'lock_closed') throw error;
      if (guard) {
        // A waiter that polls can read the result just before the leader's release writes it,
        // then win the lock the release freed: it looks once more before building again.
        if (!first && settings.share) {
          const found = await results.read(redisKey!, cacheKey);
          if (found.status === 'hit') {
            await this.release({ kind: 'locked', guard });
            return { kind: 'shared', value: found.value };
          }
        }
        return { kind: 'locked', guard };
      }
      // A waiter has seen a holder at work: Redis failing now (a restart, a dropped connection,
      // the breaker opening) is no reason to build beside it. It waits on, trying again, until
      // lockTimeout ends; only a caller that never saw the lock fails open at once.
      if (error && (first || !mayWaitOn(error) || Date.now() >= deadline)) {
        return this.withoutRedis(cacheKey, settings, error);
      }
      if (error && REDIS_FAILURES.has(error.code) && Date.now() - asking >= SILENT_MS) {
        wait.silence(error);
        return this.withoutRedis(cacheKey, settings, error);
      }
      if (error) continue;
      if (settings.onBusy === 'skip') return { kind: 'skipped' };
      if (settings.onBusy === 'throw') throw this.busy(cacheKey);
      if (Date.now() >= deadline) {
        const line = messages.render('lock_wait_timeout', {
          SECONDS: settings.lockTimeout,
          KEY: cacheKey,
        });
        log.warn('lock_wait_timeout', line);
        return { kind: 'unlocked', reason: 'timeout' };
      }
    }
  }

  /** Releases a held lock. A failed release is logged, never thrown: the TTL expires the lock. */
  release(admission: Admission): Promise<void> {
    if (admission.kind !== 'locked') return Promise.resolve();
    return this.parts.lock.release(admission.guard).then(([, error]) => {
      if (error) this.reportFailure(error);
    });
  }

  /** A release or shared-result write that Redis did not answer: logged, counted. */
  reportFailure(error: LockError): void {
    this.parts.log.warn(error.code, error.message);
    if (REDIS_FAILURES.has(error.code) || error.cause !== undefined) this.breaker?.failure();
  }

  busy(cacheKey: string): LockBusyError {
    return new LockBusyError(this.parts.messages.render('lock_busy'), cacheKey);
  }

  /** A silence found while waiting, as the lock's own failure. */
  private silenceError(error: Error): LockError {
    if (error instanceof LockError && REDIS_FAILURES.has(error.code)) return error;
    const text = this.parts.messages.render('redis_lock_failed', { ERROR: errorText(error) });
    return new LockError('redis_lock_failed', text, { cause: error });
  }

  private breakerSkip(cacheKey: string): AcquireResult {
    const text = this.parts.messages.render('lock_breaker_skip', { KEY: cacheKey });
    return [undefined, new LockError('lock_breaker_skip', text)];
  }

  private recordOutcome(result: AcquireResult): AcquireResult {
    const [, error] = result;
    if (!error) this.breaker?.success();
    else if (REDIS_FAILURES.has(error.code)) this.breaker?.failure();
    return result;
  }

  /** Redis could not be asked: run without the lock (logged), or throw, as `onRedisError` says. */
  private withoutRedis(
    cacheKey: string,
    settings: SingleFlightSettings,
    error: LockError,
  ): Admission {
    const { log, messages } = this.parts;
    const skipped = error.code === 'lock_breaker_skip';
    if (settings.onRedisError === 'throw') {
      // Bad input (a key that is no string, an invalid ttl) is the caller's error, not Redis's.
      if (!skipped && !REDIS_FAILURES.has(error.code)) throw error;
      if (!skipped) log.error(error.code, error.message);
      throw new RedisUnavailableError(messages.render('redis_unavailable'), error, cacheKey);
    }
    if (skipped) {
      log.warn('lock_breaker_skip', error.message);
      return { kind: 'unlocked', reason: 'breaker-open' };
    }
    const line = messages.render('lock_fail_open', { ERROR: error.message, KEY: cacheKey });
    log.error('lock_fail_open', line);
    return { kind: 'unlocked', reason: 'redis-error' };
  }

  private breakerMoved(
    state: CircuitState,
    previous: CircuitState,
    settings: Exclude<CircuitBreakerSettings, false>,
  ): void {
    const { log, messages } = this.parts;
    const early = this.early;
    this.early = false;
    if (state === 'open') {
      // A probe let through early that failed (Redis answers PING, not the lock): the next one
      // waits for openSeconds, or for the client to reconnect, rather than for the next PING.
      this.recovery?.stop();
      this.recovery?.start(!(early && previous === 'half-open'));
    } else {
      this.recovery?.stop();
    }
    if (state === 'half-open') this.early = early && previous === 'open';
    if (state === 'open') {
      const line = messages.render('lock_breaker_open', {
        FAILURES: this.breaker?.consecutiveFailures ?? 0,
        SECONDS: settings.openSeconds,
      });
      log.error('lock_breaker_open', line);
    } else if (state === 'closed') {
      log.log('lock_breaker_closed', messages.render('lock_breaker_closed'));
    }
    this.parts.onBreakerChange(state, previous);
  }
}
