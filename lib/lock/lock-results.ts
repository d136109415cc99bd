import type { LockError } from '../errors/lock.error.js';

/**
 * Proof of holding a lock: its Redis key and the random token written into it. Give it back to
 * `release` or `extend`.
 *
 * @example
 * ```ts
 * const [guard] = await lock.acquire('report');
 * if (guard) console.log(guard.key, guard.token, guard.fence);
 * ```
 */
export interface LockGuard {
  readonly key: string;
  readonly token: string;
  /** With `fencing: true` only: this holder's fencing number, larger than every earlier one. */
  readonly fence?: number;
}

/**
 * `[guard, undefined]` when taken, `[undefined, undefined]` when another holder has it,
 * `[undefined, error]` when Redis could not be asked.
 *
 * @example
 * ```ts
 * const [guard, error]: AcquireResult = await lock.acquire('report');
 * ```
 */
export type AcquireResult =
  | readonly [guard: LockGuard, error: undefined]
  | readonly [guard: undefined, error: undefined]
  | readonly [guard: undefined, error: LockError];

/**
 * `[true, undefined]` (also when the lock had already expired), or `[false, error]`.
 *
 * @example
 * ```ts
 * const [ok, error]: ReleaseResult = await lock.release(guard);
 * ```
 */
export type ReleaseResult =
  readonly [ok: true, error: undefined] | readonly [ok: false, error: LockError];

/**
 * `[true, undefined]` when the expiry moved, `[false, undefined]` when the lock is no longer
 * ours, `[false, error]` when Redis could not be asked.
 *
 * @example
 * ```ts
 * const [extended, error]: ExtendResult = await lock.extend(guard, 30);
 * ```
 */
export type ExtendResult =
  | readonly [extended: true, error: undefined]
  | readonly [extended: false, error: undefined]
  | readonly [extended: false, error: LockError];

/** The lock a lookup took, given once: to the caller that builds. */
export function claimOnce(guard: LockGuard): () => LockGuard | undefined {
  let left: LockGuard | undefined = guard;
  return () => {
    const taken = left;
    left = undefined;
    return taken;
  };
}
