import type { CircuitState } from '../types/events.js';
/**
 * What a {@link CircuitBreaker} runs with: the resolved `circuitBreaker` option, a clock, a listener.
 *
 * @example
 * ```ts
 * const options: CircuitBreakerOptions = { failureThreshold: 5, openSeconds: 10, probes: 1 };
 * ```
 */
export interface CircuitBreakerOptions {
  /** Consecutive Redis failures that open the breaker. */
  readonly failureThreshold: number;
  /** Seconds calls skip Redis once open, before a probe is let through. */
  readonly openSeconds: number;
  /** Calls let through at once while half-open. */
  readonly probes: number;
  /** The clock, in ms. Default `Date.now`. */
  readonly now?: () => number;
  /** Told of every state change. */
  readonly onStateChange?: (state: CircuitState, previous: CircuitState) => void;
}

/**
 * Stops calls from waiting on a Redis that is in trouble. After `failureThreshold` consecutive
 * failures it opens: `allow()` answers false and callers skip Redis (fail-open or throw, as
 * configured) without spending a command timeout. After `openSeconds` it is half-open: `probes`
 * calls are allowed; a success closes it, a failure opens it again for another `openSeconds`. A
 * probe that never reports back is given up after `openSeconds`, and another probe is allowed.
 * `recover()` makes an open breaker half-open early, when its owner saw Redis back.
 *
 * Pure logic, no timers: the state is worked out from the injected clock when asked.
 *
 * @example
 * ```ts
 * const breaker = new CircuitBreaker({ failureThreshold: 3, openSeconds: 5 });
 * if (!breaker.allow()) return runWithoutLock();
 * const [guard, error] = await lock.acquire(key);
 * if (error) breaker.failure(); else breaker.success();
 * ```
 */
export class CircuitBreaker {
  private current: CircuitState = 'closed';
  private failures = 0;
  private openedAt = 0;
  private probing = 0;
  private probeSince = 0;
  private readonly threshold: number;
  private readonly openMs: number;
  private readonly probes: number;
  private readonly now: () => number;

  constructor(private readonly options: CircuitBreakerOptions) {
    this.threshold = options.failureThreshold;
    this.openMs = options.openSeconds * 1000;
    this.probes = options.probes;
    this.now = options.now ?? Date.now;
  }

  /** The state now (an open breaker whose cool-down is over reads as half-open). */
  get state(): CircuitState {
    if (this.current === 'open' && this.now() - this.openedAt >= this.openMs) {
      this.move('half-open');
      this.probing = 0;
    }
    return this.current;
  }

  /** Consecutive failures counted so far while closed. */
  get consecutiveFailures(): number {
    return this.failures;
  }

  /**
   * Whether this call may use Redis. In half-open it says yes to `probes` calls only; each of
   * them must then report `success()` or `failure()`.
   */
  allow(): boolean {
    const state = this.state;
    if (state === 'closed') return true;
    if (state === 'open') return false;
    if (this.probing > 0 && this.now() - this.probeSince >= this.openMs) this.probing = 0;
    if (this.probing >= this.probes) return false;
    if (this.probing === 0) this.probeSince = this.now();
    this.probing++;
    return true;
  }

  /**
   * Redis was seen back before the cool-down ended (its client is ready again, or answered a
   * check): an open breaker is half-open now, so that the next `probes` calls probe at once
   * instead of after `openSeconds`. Does nothing in any other state.
   */
  recover(): void {
    if (this.state !== 'open') return;
    this.probing = 0;
    this.move('half-open');
  }

  /** Redis answered: closes the breaker and resets the failure count. */
  success(): void {
    this.failures = 0;
    this.probing = 0;
    if (this.state !== 'closed') this.move('closed');
  }

  /** Redis failed (error or timeout): counts, and opens at the threshold or on a failed probe. */
  failure(): void {
    const state = this.state;
    if (state === 'open') return;
    this.failures++;
    if (state === 'half-open' || this.failures >= this.threshold) {
      this.openedAt = this.now();
      this.probing = 0;
      this.move('open');
    }
  }

  private move(next: CircuitState): void {
    const previous = this.current;
    this.current = next;
    if (next === 'closed') this.failures = 0;
    if (previous !== next) this.options.onStateChange?.(next, previous);
  }
}
