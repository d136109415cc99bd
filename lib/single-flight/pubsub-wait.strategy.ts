import type { RedisScriptClient } from '../options/redis-lock.options.js';
import { releaseChannel } from '../redis/keys.js';
import { lockPttl } from '../redis/lock-pttl.js';
import type { ReleaseSubscriber } from './release-subscriber.js';
import type { WaitStrategy } from './wait-strategy.js';

/**
 * Options of a {@link PubSubWaitStrategy}.
 *
 * @example
 * ```ts
 * const options: PubSubWaitOptions = { client, subscriber: releaseSubscriberFor(client) };
 * ```
 */
export interface PubSubWaitOptions {
  /** The client the lock lives on; asked for the lock's PTTL. */
  client: RedisScriptClient;
  /** The process's shared release subscriber. */
  subscriber: ReleaseSubscriber;
  /** Backstop when the PTTL cannot be read (Redis trouble, or a key without expiry). Default 1000 ms. */
  fallbackPollMs?: number;
  /** Added to the PTTL backstop, so the waiter wakes just after Redis expired the key. Default 5 ms. */
  expiryMarginMs?: number;
}

const DEFAULTS = { fallbackPollMs: 1000, expiryMarginMs: 5 } as const;

/**
 * Waits for a busy lock by listening for its release (SSUBSCRIBE on the lock's release channel,
 * one shared connection per process) instead of polling. Order of a wait:
 *
 * 1. listen on the release channel and wait until Redis confirms the subscription;
 * 2. read the lock's PTTL: gone already (released between the failed acquire and the subscribe)
 *    resolves at once; otherwise a backstop timer is set to fire when the lock expires;
 * 3. resolve on the first of: the release message, the backstop, the deadline, the abort signal.
 *
 * A lost message or a holder that crashed therefore never keeps a waiter past the lock's TTL;
 * polling remains only as that backstop. Never rejects.
 *
 * @example
 * ```ts
 * const strategy = new PubSubWaitStrategy({ client, subscriber: releaseSubscriberFor(client) });
 * await strategy.waitForRelease(lock.redisKey('report'), Date.now() + 10_000);
 * ```
 */
export class PubSubWaitStrategy implements WaitStrategy {
  private readonly fallbackPollMs: number;
  private readonly expiryMarginMs: number;

  constructor(private readonly options: PubSubWaitOptions) {
    this.fallbackPollMs = options.fallbackPollMs ?? DEFAULTS.fallbackPollMs;
    this.expiryMarginMs = options.expiryMarginMs ?? DEFAULTS.expiryMarginMs;
  }

  async waitForRelease(redisKey: string, deadline: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted || Date.now() >= deadline) return;
    let woke = false;
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => {
      wake = () => {
        woke = true;
        resolve();
      };
    });
    const listening = this.options.subscriber.listen(releaseChannel(redisKey), wake);
    const timers: NodeJS.Timeout[] = [];
    const at = (ms: number): void => {
      timers.push(setTimeout(wake, Math.max(0, ms)));
    };
    const onAbort = (): void => wake();
    signal?.addEventListener('abort', onAbort, { once: true });
    at(deadline - Date.now());
    try {
      await Promise.race([listening.ready, woken]);
      if (woke) return;
      const remaining = await Promise.race([this.pttl(redisKey), woken.then(() => undefined)]);
      if (woke || remaining === -2) return;
      at(
        remaining !== undefined && remaining >= 0
          ? remaining + this.expiryMarginMs
          : this.fallbackPollMs,
      );
      await woken;
    } finally {
      for (const timer of timers) clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      listening.close();
    }
  }

  /** The PTTL, or -1 (use the fallback poll) when Redis could not be asked. */
  private async pttl(redisKey: string): Promise<number> {
    try {
      return await lockPttl(this.options.client, redisKey);
    } catch {
      return -1;
    }
  }
}
