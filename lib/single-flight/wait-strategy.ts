/**
 * How a caller that found a lock busy waits before trying again: the one seam between the
 * single-flight engine and the way it learns that a holder is done. The first strategy polls;
 * the wake-on-release strategy listens for the holder's release and keeps polling only as a
 * backstop.
 *
 * @example
 * ```ts
 * const strategy: WaitStrategy = new PollingWaitStrategy(50);
 * await strategy.waitForRelease('buffer:lock:9a0364b9e99bb480dd25e1f0284c8555', Date.now() + 5000);
 * ```
 */
export interface WaitStrategy {
  /**
   * Resolves when the lock at `redisKey` may have become free (released or expired), or when the
   * clock reaches `deadline` (ms since the epoch), or when `signal` aborts, whichever comes first.
   * It never rejects; the caller tries to acquire again and decides what to do.
   */
  waitForRelease(redisKey: string, deadline: number, signal?: AbortSignal): Promise<void>;
}
