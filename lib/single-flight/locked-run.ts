import { finalize, isObservable, Observable, type Subscription } from 'rxjs';
import type { LockGuard } from '../lock/lock-results.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { SingleFlightSettings } from '../options/single-flight.options.js';
import type { SharedResultStore } from './shared-result.js';
import { nowMs, type FlightTrace } from '../telemetry/channels.js';
import type { LockError } from '../errors/lock.error.js';
import type { Admission, LockAdmission, Peek, SingleFlightLock } from './admission.js';
import { runInFlight, type FlightContext } from './flight-context.js';
import type { ThrottledLog } from './throttled-log.js';
import { LockWatchdog } from './watchdog.js';
import type { FlightLockLostEvent } from '../types/events.js';

/** How the cache takes part in a run: what it finds after a wake-up, and how its leader lets go. */
export interface FlightHooks {
  readonly peek?: Peek;
  /** Instead of the plain release, once the work returned `value`. */
  readonly release?: (guard: LockGuard, value: unknown) => Promise<LockError | undefined>;
  /** Instead of the plain release, once the work threw. */
  readonly failed?: (guard: LockGuard, error: unknown) => Promise<void>;
  /** The lock was seen held: a waiting call waits for its release before the first try. */
  readonly lockHeld?: boolean;
  /** The lock, taken already (by the lookup that found no entry): the call is let in with it. */
  readonly claimed?: LockGuard;
  /** The lock the work is about to run under. */
  readonly holding?: (guard: LockGuard) => void;
}

export interface LockedRunParts {
  readonly lock: SingleFlightLock;
  readonly admission: LockAdmission;
  readonly results: SharedResultStore;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  /** Told when a running call's lock was lost, after it was logged. */
  readonly onLockLost: (event: FlightLockLostEvent) => void;
}

/** What a flight's trace learns from its admission: role, lock and wait. */
function noteAdmission(trace: FlightTrace, admission: Admission, waitMs: number): void {
  trace.waitMs = waitMs;
  switch (admission.kind) {
    case 'skipped':
      trace.role = 'waiter';
      trace.outcome = 'skipped';
      return;
    case 'shared':
      trace.role = 'shared';
      return;
    case 'unlocked':
      trace.role = 'leader';
      trace.locked = false;
      trace.unlockedReason = admission.reason;
      return;
    case 'locked':
      trace.role = 'leader';
      trace.locked = true;
  }
}

/** The signal of work that runs without the lock: nothing can be lost, so it never aborts. */
const NEVER_ABORTED: AbortSignal = new AbortController().signal;

const isPromiseLike = (value: unknown): value is PromiseLike<unknown> =>
  (typeof value === 'object' || typeof value === 'function') &&
  value !== null &&
  typeof (value as { then?: unknown }).then === 'function';

/**
 * One admitted call's run: the work runs holding the lock under a watchdog, then the result is
 * shared (`share: true`) and the lock released in one script, or simply released.
 */
export class LockedRun {
  constructor(private readonly parts: LockedRunParts) {}

  /** Admits the call, then runs `work` as its admission allows; `trace` gets role, lock and times. */
  async promise<T>(
    cacheKey: string,
    redisKey: string | undefined,
    work: () => T,
    settings: SingleFlightSettings,
    hooks?: FlightHooks,
    trace?: FlightTrace,
  ): Promise<Awaited<T> | undefined> {
    const started = trace === undefined ? 0 : nowMs();
    const admission = await this.parts.admission.admit(
      cacheKey,
      redisKey,
      settings,
      hooks?.peek,
      hooks?.lockHeld,
      hooks?.claimed,
    );
    if (trace !== undefined) noteAdmission(trace, admission, nowMs() - started);
    switch (admission.kind) {
      case 'skipped':
        return undefined;
      case 'shared':
        return admission.value as Awaited<T>;
      case 'unlocked':
        return await runInFlight(this.contextOf(cacheKey, admission, settings).context, work);
      case 'locked':
        try {
          return await this.locked(cacheKey, admission, work, settings, hooks);
        } finally {
          if (trace !== undefined) trace.holdMs = nowMs() - started - trace.waitMs!;
        }
    }
  }

  /** One subscription is one call, holding the lock until `work()` completes, errors or is unsubscribed. */
  observable<T>(
    cacheKey: string,
    redisKey: string | undefined,
    work: () => Observable<T>,
    settings: SingleFlightSettings,
    trace?: FlightTrace,
  ): Observable<T | undefined> {
    const { admission: control } = this.parts;
    return new Observable<T | undefined>((subscriber) => {
      let inner: Subscription | undefined;
      const run = async (): Promise<void> => {
        const started = trace === undefined ? 0 : nowMs();
        const admission = await control.admit(cacheKey, redisKey, settings);
        if (trace !== undefined) noteAdmission(trace, admission, nowMs() - started);
        if (subscriber.closed) return void control.release(admission);
        if (admission.kind === 'skipped' || admission.kind === 'shared') {
          subscriber.next(undefined);
          return subscriber.complete();
        }
        const { context, done } = this.contextOf(cacheKey, admission, settings);
        const end = (): void => {
          done();
          void control.release(admission);
        };
        let source: Observable<T>;
        try {
          source = runInFlight(context, work);
        } catch (error) {
          end();
          return subscriber.error(error);
        }
        inner = source.pipe(finalize(end)).subscribe(subscriber);
      };
      run().catch((error: unknown) => subscriber.error(error));
      return () => inner?.unsubscribe();
    });
  }

  private async locked<T>(
    cacheKey: string,
    admission: Admission & { kind: 'locked' },
    work: () => T,
    settings: SingleFlightSettings,
    hooks?: FlightHooks,
  ): Promise<Awaited<T>> {
    const { admission: control, results } = this.parts;
    const { guard } = admission;
    const { context, done } = this.contextOf(cacheKey, admission, settings);
    let value: Awaited<T>;
    try {
      hooks?.holding?.(guard);
      const returned = runInFlight(context, work);
      // A plain value is not awaited: one microtask turn and promise less per call.
      value = isPromiseLike(returned) ? await returned : (returned as Awaited<T>);
    } catch (error) {
      done();
      if (hooks?.failed) await hooks.failed(guard, error);
      else await this.releaseWithoutResult(guard, settings);
      throw error;
    }
    if (hooks?.release) {
      done();
      const failure = await hooks.release(guard, value);
      if (failure) control.reportFailure(failure);
      return value;
    }
    if (isObservable(value) && !settings.share) {
      return value.pipe(
        finalize(() => {
          done();
          void control.release(admission);
        }),
      ) as Awaited<T>;
    }
    if (!settings.share) {
      done();
      await control.release(admission);
      return value;
    }
    let payload: string;
    try {
      payload = results.serialize(value, cacheKey);
    } catch (error) {
      done();
      await this.releaseWithoutResult(guard, settings);
      throw error;
    }
    done();
    const [, error] = await results.storeAndRelease(guard, payload, settings.lockTimeout);
    if (error) control.reportFailure(error);
    return value;
  }

  /** Releases with nothing to share; with `share` on, an older result is removed too. */
  private async releaseWithoutResult(
    guard: LockGuard,
    settings: SingleFlightSettings,
  ): Promise<void> {
    const { admission: control, results } = this.parts;
    if (!settings.share) return control.release({ kind: 'locked', guard });
    const [, error] = await results.storeAndRelease(guard, undefined);
    if (error) control.reportFailure(error);
  }

  /** The work's context; a held lock gets a watchdog, stopped by `done()`. */
  private contextOf(
    cacheKey: string,
    admission: Admission,
    settings: SingleFlightSettings,
  ): { context: FlightContext; done: () => void } {
    if (admission.kind !== 'locked') {
      return {
        context: { cacheKey, locked: false, signal: NEVER_ABORTED, fence: undefined },
        done: () => {},
      };
    }
    const watchdog = new LockWatchdog({
      lock: this.parts.lock,
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
      done: () => watchdog.finish(),
    };
  }

  private lockLost(event: FlightLockLostEvent): void {
    const { messages, log } = this.parts;
    const line = messages.render('lock_lost', { KEY: event.cacheKey, REASON: event.reason });
    log.warn('lock_lost', line);
    this.parts.onLockLost(event);
  }
}
