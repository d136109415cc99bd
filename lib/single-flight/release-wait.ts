import type { RedisScriptClient } from '../types/clients.js';
import { releaseChannel } from '../redis/keys.js';
import { lockPttl } from '../redis/plain-commands.js';
import { timerMs } from '../options/seconds.js';
import { asError } from '../messages/error-text.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
  type Listening,
  type ReleaseSubscriber,
} from './release-subscriber.js';

/** Backstop when there is no client, or the key has no expiry. */
const FALLBACK_POLL_MS = 1000;
/** Added to the PTTL backstop, so the waiter wakes just after Redis expired the key. */
const EXPIRY_MARGIN_MS = 5;
/** How often a waiter tries again while the subscriber is unusable or Redis cannot be asked. */
const POLL_MS = 50;
/**
 * How often a waiter asks for the lock's remaining life while it waits (and how long it waits for
 * its subscription before it asks): a Redis gone silent is found within this + commandTimeout.
 */
export const RECHECK_MS = 250;
/** A command that failed after this long unanswered met a silent Redis, not one that refused. */
export const SILENT_MS = 100;

/** A PTTL that failed after going unanswered for SILENT_MS or more. */
interface Silence {
  readonly silent: Error;
}

/** Jittered by a fifth either way, so that waiters do not poll in lockstep. */
const poll = (): number => POLL_MS * (0.8 + Math.random() * 0.4);

const subscriberOf = (client: RedisScriptClient): ReleaseSubscriber =>
  releaseSubscriberFor(client as unknown as DuplicableClient);

/**
 * How a busy caller waits for the holder's release: SSUBSCRIBE on the lock's release channel (one
 * shared connection per client), then PTTL, so that a release before the subscription or a holder
 * that crashed never keeps a waiter past the lock's expiry. While the subscriber is unusable (no
 * SSUBSCRIBE on this Redis, a lost connection) the waiter polls instead. Never rejects.
 */
export class ReleaseWait {
  /** Failures told already: every waiter listening at the time hears of the same one. */
  private readonly told = new WeakSet<Error>();
  private client: RedisScriptClient | undefined;
  /** The wake-ups of the waits under way, for `end()`. */
  private readonly waking = new Set<() => void>();
  private ended = false;
  /** When a command last failed as a silent Redis fails, and with what. */
  private silentAt = -1;
  private silentError: Error | undefined;

  constructor(
    private readonly getClient: () => Promise<RedisScriptClient>,
    private readonly onError: (error: Error) => void,
  ) {}

  /** Whether a release would reach a waiter now; opens no connection. */
  async subscriberUsable(): Promise<boolean> {
    const client = await this.resolveClient();
    return client !== undefined && subscriberOf(client).usable;
  }

  /** Ends every wait under way, and every one to come, at once (at shutdown). */
  end(): void {
    this.ended = true;
    for (const wake of this.waking) wake();
    this.waking.clear();
  }

  /** Redis was found silent (`error`): every wait under way ends, and learns it (`silentSince`). */
  silence(error: Error): void {
    this.silentAt = Date.now();
    this.silentError = error;
    for (const wake of this.waking) wake();
  }

  /** The error of the silence found since `since` (ms since the epoch), if one was. */
  silentSince(since: number): Error | undefined {
    return this.silentAt >= since ? this.silentError : undefined;
  }

  /** Closes the subscriber connection of the client waited on so far (at shutdown). */
  close(): void {
    if (this.client) subscriberOf(this.client).close();
  }

  /**
   * Resolves when the lock at `redisKey` may be free, or at `deadline` (ms since the epoch): with
   * the text of the release message that woke it, `undefined` when none did.
   */
  async waitForRelease(redisKey: string, deadline: number): Promise<string | undefined> {
    if (this.ended || Date.now() >= deadline) return undefined;
    let woke = false;
    let text: string | undefined;
    let wake!: (message?: string) => void;
    const woken = new Promise<void>((resolve) => {
      wake = (message) => {
        if (woke) return;
        woke = true;
        text = message;
        resolve();
      };
    });
    this.waking.add(wake);
    const timers: NodeJS.Timeout[] = [];
    const at = (ms: number): void => void timers.push(setTimeout(() => wake(), timerMs(ms)));
    const after = (ms: number): Promise<void> =>
      new Promise((resolve) => void timers.push(setTimeout(resolve, ms)));
    at(deadline - Date.now());
    let listening: Listening | undefined;
    try {
      const client = await Promise.race([this.resolveClient(), woken.then(() => undefined)]);
      if (woke) return text;
      if (client) {
        const subscriber = subscriberOf(client);
        const usable = subscriber.usable;
        listening = subscriber.listen(releaseChannel(redisKey), wake, (error) => this.tell(error));
        // No release message can come, or (a retry on a connection that is down) not soon.
        if (!usable) at(poll());
        // A silent Redis confirms no subscription: the PTTL below finds it out, not the deadline.
        const late = after(RECHECK_MS).then(() => true);
        const subscribed = await Promise.race([listening.ready, woken.then(() => false), late]);
        if (woke) return text;
        if (!subscribed) {
          if (usable) at(poll());
          await woken;
          return text;
        }
      } else {
        at(FALLBACK_POLL_MS);
        await woken;
        return text;
      }
      const fallbackAt = Date.now() + FALLBACK_POLL_MS;
      for (;;) {
        const remaining = await Promise.race([
          this.pttl(client, redisKey),
          woken.then(() => undefined),
        ]);
        if (woke || remaining === -2) return text;
        if (typeof remaining === 'object') {
          this.silence(remaining.silent);
          return text;
        }
        // Redis could not be asked (`undefined`): its trouble may end at any moment (a restart, a
        // reconnect) with no release to wake this waiter, so it looks again soon.
        const backstop =
          remaining === undefined
            ? poll()
            : remaining >= 0
              ? remaining + EXPIRY_MARGIN_MS
              : fallbackAt - Date.now();
        if (backstop <= RECHECK_MS) {
          at(backstop);
          await woken;
          return text;
        }
        await Promise.race([woken, after(RECHECK_MS)]);
        if (woke) return text;
      }
    } finally {
      for (const timer of timers) clearTimeout(timer);
      this.waking.delete(wake);
      listening?.close();
    }
  }

  private tell(error: Error): void {
    if (this.told.has(error)) return;
    this.told.add(error);
    try {
      this.onError(error);
    } catch {
      // The owner's error is the owner's: the waiter goes on.
    }
  }

  /** The client, or `undefined` (then the fallback poll) when it cannot be had. */
  private async resolveClient(): Promise<RedisScriptClient | undefined> {
    try {
      return (this.client = await this.getClient());
    } catch {
      return undefined;
    }
  }

  /** The PTTL; `undefined` when Redis refused to be asked, a Silence when it did not answer. */
  private async pttl(
    client: RedisScriptClient,
    redisKey: string,
  ): Promise<number | undefined | Silence> {
    const asked = Date.now();
    try {
      return await lockPttl(client, redisKey);
    } catch (error) {
      return Date.now() - asked >= SILENT_MS ? { silent: asError(error) } : undefined;
    }
  }
}
