import type { CircuitState } from '../types/events.js';

export interface CircuitBreakerOptions {
  readonly failureThreshold: number;
  readonly openSeconds: number;
  readonly probes: number;
  readonly now?: () => number;
  readonly onStateChange?: (state: CircuitState, previous: CircuitState) => void;
}

/**
 * After `failureThreshold` consecutive failures it opens: callers skip Redis. After `openSeconds`
 * it is half-open: `probes` calls may try; a success closes it, a failure opens it again. A probe
 * that never reports back is given up after `openSeconds`. No timers: the state is worked out
 * from the clock when asked.
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

  get state(): CircuitState {
    if (this.current === 'open' && this.now() - this.openedAt >= this.openMs) {
      this.move('half-open');
      this.probing = 0;
    }
    return this.current;
  }

  get consecutiveFailures(): number {
    return this.failures;
  }

  /** Whether this call may use Redis; each call allowed in half-open must report back. */
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

  /** Redis was seen back before the cool-down ended: an open breaker is half-open now. */
  recover(): void {
    if (this.state !== 'open') return;
    this.probing = 0;
    this.move('half-open');
  }

  success(): void {
    this.failures = 0;
    this.probing = 0;
    if (this.state !== 'closed') this.move('closed');
  }

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
