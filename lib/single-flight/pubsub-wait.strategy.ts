import type { RedisScriptClient } from '../options/redis-lock.options.js';
import { releaseChannel } from '../redis/keys.js';
import { lockPttl } from '../redis/lock-pttl.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
  type Listening,
  type ReleaseSubscriber,
} from './release-subscriber.js';
import type { WaitStrategy } from './wait-strategy.js';

/**
 * Options of a {@link PubSubWaitStrategy}.
 *
 * @example
 * ```ts
 * const options: PubSubWaitOptions = { client: () => lockService.getClient() };
 * ```
 */
export interface PubSubWaitOptions {
  /**
   * The client the lock lives on (asked for the lock's PTTL), or a function that resolves it, such
   * as `() => lockService.getClient()` for a client the service makes lazily.
   */
  client: RedisScriptClient | (() => Promise<RedisScriptClient>);
  /** Default: the process's one subscriber for that client, `releaseSubscriberFor(client)`. */
  subscriber?: ReleaseSubscriber;
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
 * 1. listen on the release channel and wait until Redis confirms the subscription (a client that
 *    cannot be had or cannot subscribe skips to the backstop);
 * 2. read the lock's PTTL: gone already (released between the failed acquire and the subscribe)
 *    resolves at once; otherwise a backstop timer is set to fire when the lock expires;
 * 3. resolve on the first of: the release message, the backstop, the deadline, the abort signal.
 *
 * A lost message or a holder that crashed therefore never keeps a waiter past the lock's TTL;
 * polling remains only as that backstop. Never rejects.
 *
 * @example
 * ```ts
 * const strategy = new PubSubWaitStrategy({ client: () => lock.getClient() });
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
    const timers: NodeJS.Timeout[] = [];
    const at = (ms: number): void => {
      timers.push(setTimeout(wake, Math.max(0, ms)));
    };
    const onAbort = (): void => wake();
    signal?.addEventListener('abort', onAbort, { once: true });
    at(deadline - Date.now());
    let listening: Listening | undefined;
    try {
      const client = await Promise.race([this.resolveClient(), woken.then(() => undefined)]);
      if (woke) return;
      if (client) {
        listening = this.subscriberFor(client).listen(releaseChannel(redisKey), wake);
        await Promise.race([listening.ready, woken]);
        if (woke) return;
      }
      const remaining = client
        ? await Promise.race([this.pttl(client, redisKey), woken.then(() => undefined)])
        : -1;
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
      listening?.close();
    }
  }

  /** The client, or `undefined` (then the fallback poll) when it cannot be had. */
  private async resolveClient(): Promise<RedisScriptClient | undefined> {
    const { client } = this.options;
    try {
      return typeof client === 'function' ? await client() : client;
    } catch {
      return undefined;
    }
  }

  private subscriberFor(client: RedisScriptClient): ReleaseSubscriber {
    return this.options.subscriber ?? releaseSubscriberFor(client as unknown as DuplicableClient);
  }

  /** The PTTL, or -1 (use the fallback poll) when Redis could not be asked. */
  private async pttl(client: RedisScriptClient, redisKey: string): Promise<number> {
    try {
      return await lockPttl(client, redisKey);
    } catch {
      return -1;
    }
  }
}
