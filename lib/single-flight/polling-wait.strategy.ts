import type { WaitStrategy } from './wait-strategy.js';

/**
 * Milliseconds between two tries of a waiting `@SingleFlight` caller; each wait is jittered by up
 * to a fifth either way so that waiters do not poll in lockstep.
 *
 * @example
 * ```ts
 * new PollingWaitStrategy(POLL_INTERVAL_MS);
 * ```
 */
export const POLL_INTERVAL_MS = 50;

/**
 * The first {@link WaitStrategy}: sleep a short, jittered interval and let the engine try again.
 * It never looks at Redis itself. The module's default, `PubSubWaitStrategy`, wakes on the release
 * instead and keeps polling only as a backstop.
 *
 * @example
 * ```ts
 * const strategy = new PollingWaitStrategy(20);
 * await strategy.waitForRelease(lock.redisKey('report'), Date.now() + 1000);
 * ```
 */
export class PollingWaitStrategy implements WaitStrategy {
  constructor(private readonly interval: number = POLL_INTERVAL_MS) {}

  waitForRelease(_redisKey: string, deadline: number, signal?: AbortSignal): Promise<void> {
    const jittered = this.interval * (0.8 + Math.random() * 0.4);
    const delay = Math.max(0, Math.min(jittered, deadline - Date.now()));
    return new Promise<void>((resolve) => {
      if (signal?.aborted) return resolve();
      const done = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, delay);
      signal?.addEventListener('abort', done, { once: true });
    });
  }
}
