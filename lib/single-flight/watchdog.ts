import { EventEmitter } from 'node:events';
import type { ExtendResult, LockGuard } from '../lock/lock-results.js';
import { asError } from '../messages/error-text.js';
import type { LockLostEvent, LockLostReason } from '../types/events.js';

/**
 * What the watchdog needs from the lock: `RedisLockService.extend`.
 *
 * @example
 * ```ts
 * const extender: LockExtender = lockService;
 * ```
 */
export interface LockExtender {
  extend(guard: LockGuard, ttl?: number): Promise<ExtendResult>;
}

/**
 * Options of a {@link LockWatchdog}.
 *
 * @example
 * ```ts
 * const options: WatchdogOptions = { lock, guard, ttl: 10, maxHold: 300 };
 * ```
 */
export interface WatchdogOptions {
  lock: LockExtender;
  guard: LockGuard;
  /** Seconds each extension sets the lock's expiry to (the lock's ttl). It runs every ttl/3. */
  ttl: number;
  /** Seconds after `start()` when the lock is let go: no extension reaches past it. Default: none. */
  maxHold?: number;
  /** Also called on lock loss, besides the `'lockLost'` event. */
  onLockLost?: (event: LockLostEvent) => void;
}

/**
 * Keeps a held lock alive while long work runs: every ttl/3 it moves the expiry to ttl from now
 * with the compare-token `extend`, so the TTL can be short (fast recovery after a crash) while a
 * build of any length stays exclusive. It stops at `maxHold`.
 *
 * When an extension finds the lock gone (or Redis unreachable for a whole TTL, or `maxHold`
 * reached), it emits `'lockLost'`, calls `onLockLost`, and aborts {@link signal}: hand the signal to
 * the work (`fetch`, database drivers, your own loops) so it stops writing. Nothing it does ever
 * rejects or throws into the event loop; an extension that fails for Redis trouble emits
 * `'extendFailed'` and is tried again at the next tick.
 *
 * @example
 * ```ts
 * const watchdog = new LockWatchdog({ lock, guard, ttl: 10, maxHold: 600 }).start();
 * watchdog.on('lockLost', (e) => logger.warn(`lock ${e.key} lost: ${e.reason}`));
 * try {
 *   await build({ signal: watchdog.signal });
 * } finally {
 *   watchdog.stop();
 *   await lock.release(guard);
 * }
 * ```
 */
export class LockWatchdog extends EventEmitter<{
  lockLost: [LockLostEvent];
  extended: [];
  extendFailed: [Error];
}> {
  // Made when someone reads `signal` (or the lock is lost): most work never looks at it, and an
  // AbortController per call is a measurable share of a fast method's cost.
  private controller: AbortController | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private startedAt = 0;
  private lastExtendedAt = 0;
  private readonly ttlMs: number;
  private readonly intervalMs: number;
  private readonly maxHoldMs: number | undefined;

  constructor(private readonly options: WatchdogOptions) {
    super();
    this.ttlMs = options.ttl * 1000;
    this.intervalMs = Math.max(1, Math.floor(this.ttlMs / 3));
    this.maxHoldMs = options.maxHold === undefined ? undefined : options.maxHold * 1000;
  }

  /** Aborted, with the {@link LockLostEvent} as its reason, when the lock is lost. */
  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  /** Whether the watchdog still extends the lock. */
  get active(): boolean {
    return this.running;
  }

  /** Starts extending (the lock was just acquired, so the first extension is ttl/3 away). */
  start(): this {
    if (this.running || this.controller?.signal.aborted) return this;
    this.running = true;
    this.startedAt = this.lastExtendedAt = Date.now();
    this.schedule(this.intervalMs);
    return this;
  }

  /** Stops extending; call it before releasing. The signal is left as it is. */
  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Stops extending because the work ended. A lock not extended for a whole TTL by then (the event
   * loop stalled past it, so no extension could run) has expired in Redis, and may be another's:
   * it is reported lost, as the next extension would have found it.
   */
  finish(): void {
    if (this.running && Date.now() - this.lastExtendedAt >= this.ttlMs) return this.lose('lost');
    this.stop();
  }

  private schedule(ms: number): void {
    // unref: the work the lock guards keeps the process alive, the watchdog alone must not.
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    if (!this.running) return;
    const now = Date.now();
    let ttlMs = this.ttlMs;
    if (this.maxHoldMs !== undefined) {
      const left = this.startedAt + this.maxHoldMs - now;
      if (left <= 0) return this.lose('maxHold');
      ttlMs = Math.min(ttlMs, left);
    }
    let extended: boolean;
    let error: Error | undefined;
    try {
      [extended, error] = await this.options.lock.extend(this.options.guard, ttlMs / 1000);
    } catch (thrown) {
      // The service never rejects, but another LockExtender might.
      extended = false;
      error = asError(thrown);
    }
    if (!this.running) return;
    if (extended) {
      this.lastExtendedAt = now;
      this.safeEmit('extended');
    } else if (error === undefined) {
      return this.lose('lost');
    } else {
      this.safeEmit('extendFailed', error);
      if (Date.now() - this.lastExtendedAt >= this.ttlMs) return this.lose('unreachable', error);
    }
    const next =
      this.maxHoldMs === undefined
        ? this.intervalMs
        : Math.min(this.intervalMs, this.startedAt + this.maxHoldMs - Date.now());
    this.schedule(Math.max(0, next));
  }

  private lose(reason: LockLostReason, error?: Error): void {
    this.stop();
    const event: LockLostEvent = { key: this.options.guard.key, reason, error };
    this.safeEmit('lockLost', event);
    try {
      this.options.onLockLost?.(event);
    } catch {
      // A throwing callback must not turn into an unhandled rejection.
    }
    (this.controller ??= new AbortController()).abort(event);
  }

  /** emit() without letting a throwing listener escape the timer. */
  private safeEmit<E extends 'lockLost' | 'extended' | 'extendFailed'>(
    event: E,
    ...args: E extends 'lockLost' ? [LockLostEvent] : E extends 'extendFailed' ? [Error] : []
  ): void {
    try {
      (this.emit as (e: string, ...a: unknown[]) => boolean)(event, ...args);
    } catch {
      // Listeners are the user's; their errors are theirs to log.
    }
  }
}
