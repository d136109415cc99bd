/**
 * What the lock does to Redis, as a small executable model (a store of tokens with expiries), for
 * model-based tests against a real Redis.
 *
 *   store : TEXT ⇸ TOKEN,  expiry : TEXT ⇸ ℝ,  dom expiry = dom store
 *
 * Real time cannot be read exactly: a command runs at some instant inside the interval the test
 * measured around it. So each expiry is kept as a window [low, high], and the state of a key at a
 * call is FREE or HELD only when the whole call interval, widened by a margin, lies on one side of
 * that window; otherwise it is UNCERTAIN and the test resyncs the model from Redis instead of
 * asserting.
 */

/** A time interval in milliseconds (performance.now()) inside which a Redis command ran. */
export interface Interval {
  readonly start: number;
  readonly end: number;
}

interface Entry {
  readonly token: string;
  /** The key expires at some instant in [low, high]. */
  readonly low: number;
  readonly high: number;
}

export type KeyState = 'free' | 'held' | 'uncertain';

export class LockModel {
  private readonly store = new Map<string, Entry>();
  /** How many locks the model saw expire, so a test can show expiry was exercised. */
  expirations = 0;

  constructor(private readonly marginMs: number) {}

  /** Drops what surely expired, then the state of `rkey` for a command that ran within `at`. */
  state(rkey: string, at: Interval): KeyState {
    const entry = this.store.get(rkey);
    if (!entry) return 'free';
    if (at.start - this.marginMs > entry.high) {
      this.store.delete(rkey); // expired: expiry r ≤ now
      this.expirations++;
      return 'free';
    }
    if (at.end + this.marginMs < entry.low) return 'held';
    return 'uncertain';
  }

  /** The token the model says `rkey` holds (meaningful when its state is 'held'). */
  token(rkey: string): string | undefined {
    return this.store.get(rkey)?.token;
  }

  /** Acquire of a free key r ∉ dom store: store′ = store ⊕ {r ↦ token}, expiry′ = now + ttlMs. */
  acquired(rkey: string, token: string, at: Interval, ttlMs: number): void {
    this.store.set(rkey, { token, low: at.start + ttlMs, high: at.end + ttlMs });
  }

  /** A release with the matching token: store′ = {r} ⩤ store. */
  deleted(rkey: string): void {
    this.store.delete(rkey);
  }

  /** Replaces what the model knows of `rkey` by what Redis answered to GET and PTTL within `at`. */
  resync(rkey: string, value: string | null, pttl: number, at: Interval): void {
    if (value === null || pttl < 0) {
      this.store.delete(rkey);
      return;
    }
    this.store.set(rkey, { token: value, low: at.start + pttl, high: at.end + pttl + 1 });
  }
}

/** Runs `call` and returns its result with the interval it ran in. */
export async function timed<T>(call: () => Promise<T>): Promise<[T, Interval]> {
  const start = performance.now();
  const result = await call();
  return [result, { start, end: performance.now() }];
}
