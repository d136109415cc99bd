import type { RedisScriptClient } from '../types/clients.js';
import { releaseChannel } from '../redis/keys.js';
import { lockPttl } from '../redis/plain-commands.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
  type Listening,
  type ReleaseSubscriber,
} from './release-subscriber.js';
import { POLL_INTERVAL_MS } from './polling-wait.strategy.js';
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
  /**
   * How often a waiter tries again while the subscriber is unusable (jittered by a fifth either
   * way). Default `POLL_INTERVAL_MS`.
   */
  pollMs?: number;
  /**
   * Told once about each failure of the subscriber that a waiter of this strategy heard of (a
   * refused SSUBSCRIBE, a lost connection). The engine logs it, rate limited.
   */
  onError?: (error: Error) => void;
}

const DEFAULTS = { fallbackPollMs: 1000, expiryMarginMs: 5, pollMs: POLL_INTERVAL_MS } as const;

/**
 * Waits for a busy lock by listening for its release (SSUBSCRIBE on the lock's release channel,
 * one shared connection per process) instead of polling. Order of a wait:
 *
 * 1. listen on the release channel and wait until Redis confirms the subscription (a client that
 *    cannot be had skips to the fallback poll);
 * 2. read the lock's PTTL: gone already (released between the failed acquire and the subscribe)
 *    resolves at once; otherwise a backstop timer is set to fire when the lock expires;
 * 3. resolve on the first of: the release message, the backstop, the deadline, the abort signal.
 *
 * A lost message or a holder that crashed therefore never keeps a waiter past the lock's TTL.
 * While the subscriber is unusable (its SSUBSCRIBE was refused, its connection is down) no
 * message can come: the waiter resolves after a short jittered poll (`pollMs`) instead, so the
 * engine tries again soon rather than at the lock's expiry. Each such failure is told to
 * `onError` once. Never rejects.
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
  private readonly pollMs: number;
  private readonly errorListeners = new Set<(error: Error) => void>();
  /** Failures told already: every waiter listening at the time hears of the same one. */
  private readonly told = new WeakSet<Error>();

  constructor(private readonly options: PubSubWaitOptions) {
    this.fallbackPollMs = options.fallbackPollMs ?? DEFAULTS.fallbackPollMs;
    this.expiryMarginMs = options.expiryMarginMs ?? DEFAULTS.expiryMarginMs;
    this.pollMs = options.pollMs ?? DEFAULTS.pollMs;
    if (options.onError) this.errorListeners.add(options.onError);
  }

  /**
   * Adds a listener told of subscriber failures like `options.onError` (for an owner made after
   * the strategy, such as the engine); the returned function removes it.
   */
  addErrorListener(listener: (error: Error) => void): () => void {
    this.errorListeners.add(listener);
    return () => void this.errorListeners.delete(listener);
  }

  /**
   * Whether a release would reach this strategy's waiters now: the `usable` flag of the
   * subscriber of the lock's client (`false` when the client cannot be had). Opens no pub/sub
   * connection: the subscriber connects on the first wait.
   */
  async subscriberUsable(): Promise<boolean> {
    const client = await this.resolveClient();
    return client !== undefined && this.subscriberFor(client).usable;
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
        const subscriber = this.subscriberFor(client);
        const usable = subscriber.usable;
        const onError = (error: Error): void => this.tell(error);
        listening = subscriber.listen(releaseChannel(redisKey), wake, onError);
        // No release message can come, or (a retry on a connection that is down) not soon: try
        // again after a short poll instead of at the lock's expiry.
        if (!usable) at(this.poll());
        const subscribed = await Promise.race([listening.ready, woken.then(() => false)]);
        if (woke) return;
        if (!subscribed) {
          if (usable) at(this.poll());
          return await woken;
        }
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

  /** The poll interval, jittered by a fifth either way so that waiters do not poll in lockstep. */
  private poll(): number {
    return this.pollMs * (0.8 + Math.random() * 0.4);
  }

  private tell(error: Error): void {
    if (this.told.has(error)) return;
    this.told.add(error);
    for (const listener of this.errorListeners) {
      try {
        listener(error);
      } catch {
        // A listener's error is the listener's: the waiter goes on.
      }
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
