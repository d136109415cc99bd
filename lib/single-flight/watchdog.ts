import type { ExtendResult, LockGuard } from '../lock/lock-results.js';
import { asError } from '../messages/error-text.js';
import type { LockLostEvent, LockLostReason } from '../types/events.js';

export interface WatchdogOptions {
  lock: { extend(guard: LockGuard, ttl?: number): Promise<ExtendResult> };
  guard: LockGuard;
  /** Seconds each extension sets the lock's expiry to; it runs every ttl/3. */
  ttl: number;
  /** Seconds after `start()` when the lock is let go: no extension reaches past it. */
  maxHold?: number;
  onLockLost: (event: LockLostEvent) => void;
}

/**
 * Keeps a held lock alive while long work runs: every ttl/3 it moves the expiry to ttl from now
 * with the compare-token `extend`, up to `maxHold`. A lock found gone, Redis unreachable for a
 * whole TTL, or `maxHold` reached calls `onLockLost` and aborts `signal`. Never throws into the
 * event loop.
 */
export class LockWatchdog {
  // Made when someone reads `signal` (or the lock is lost): an AbortController per call is a
  // measurable share of a fast method's cost.
  private controller: AbortController | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private startedAt = 0;
  private lastExtendedAt = 0;
  private readonly ttlMs: number;
  private readonly intervalMs: number;
  private readonly maxHoldMs: number | undefined;

  constructor(private readonly options: WatchdogOptions) {
    this.ttlMs = options.ttl * 1000;
    this.intervalMs = Math.max(1, Math.floor(this.ttlMs / 3));
    this.maxHoldMs = options.maxHold === undefined ? undefined : options.maxHold * 1000;
  }

  /** Aborted, with the `LockLostEvent` as its reason, when the lock is lost. */
  get signal(): AbortSignal {
    return (this.controller ??= new AbortController()).signal;
  }

  /** Starts extending (the lock was just acquired, so the first extension is ttl/3 away). */
  start(): this {
    if (this.running || this.controller?.signal.aborted) return this;
    this.running = true;
    this.startedAt = this.lastExtendedAt = Date.now();
    this.schedule(this.intervalMs);
    return this;
  }

  stop(): void {
    this.running = false;
    // ref() first: Node drops the list of a cleared timer's duration only for a ref'd timer, and
    // keeps an unref'd one's (one per ttl) until that duration has passed.
    this.timer?.ref();
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /**
   * Stops because the work ended. A lock not extended for a whole TTL by then (the event loop
   * stalled past it) has expired in Redis and may be another's: it is reported lost.
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
      extended = false;
      error = asError(thrown);
    }
    if (!this.running) return;
    if (extended) this.lastExtendedAt = now;
    else if (error === undefined) return this.lose('lost');
    else if (Date.now() - this.lastExtendedAt >= this.ttlMs) return this.lose('unreachable', error);
    const next =
      this.maxHoldMs === undefined
        ? this.intervalMs
        : Math.min(this.intervalMs, this.startedAt + this.maxHoldMs - Date.now());
    this.schedule(Math.max(0, next));
  }

  private lose(reason: LockLostReason, error?: Error): void {
    this.stop();
    const event: LockLostEvent = { key: this.options.guard.key, reason, error };
    try {
      this.options.onLockLost(event);
    } catch {
      // A throwing callback must not turn into an unhandled rejection.
    }
    (this.controller ??= new AbortController()).abort(event);
  }
}
