import { isIoredisClient, type RedisScriptClient } from '../options/redis-lock.options.js';
import { releaseLock } from '../redis/release-lock.js';
import type { LockGuard } from './lock-results.js';

/** What a client that says when it is connected again has: ioredis's `'ready'` event. */
interface ReadyEmitter {
  once(event: 'ready', listener: () => void): unknown;
}

/**
 * An ioredis client (`Redis`, `Cluster`, or iovalkey's), which emits `'ready'`; not any object with
 * a `once` method: a Proxy that answers every property would send it as a command.
 */
const emitsReady = (client: unknown): client is ReadyEmitter =>
  isIoredisClient(client) && typeof (client as Partial<ReadyEmitter>).once === 'function';

/** Most releases kept at once; more are dropped (their locks end by their TTL). */
const MAX_KEPT = 10_000;

/**
 * Releases that could not be sent behind a failed acquire because the connection was down or
 * broke (the acquire may have run, its reply lost with the connection): sent once the client is
 * ready again, for the locks whose TTL has not ended yet. One `'ready'` listener at a time,
 * whatever the number kept. A release compares the token, so it never touches another holder's
 * lock. Clients that emit no `'ready'` keep nothing: their locks end by their TTL.
 *
 * @example
 * ```ts
 * const unsent = new UnsentReleases(client, () => commands);
 * releaseLock(commands, guard.key, guard.token).catch(() => unsent.add(guard, ttlMs));
 * ```
 */
export class UnsentReleases {
  /** Token → the guard and when its lock ends at the latest. */
  private readonly kept = new Map<string, { guard: LockGuard; until: number }>();
  private listening = false;

  constructor(
    private readonly emitter: unknown,
    private readonly commands: () => RedisScriptClient,
  ) {}

  /** Keeps `guard`'s release for the next `'ready'`, for at most `ttlMs`. */
  add(guard: LockGuard, ttlMs: number): void {
    if (!emitsReady(this.emitter) || this.kept.size >= MAX_KEPT) return;
    this.kept.set(guard.token, { guard, until: Date.now() + ttlMs });
    if (this.listening) return;
    this.listening = true;
    this.emitter.once('ready', () => this.send());
  }

  private send(): void {
    this.listening = false;
    const now = Date.now();
    const due = [...this.kept.values()];
    this.kept.clear();
    for (const { guard, until } of due) {
      if (until <= now) continue;
      // Best effort again: one that fails now is left to its TTL.
      releaseLock(this.commands(), guard.key, guard.token).catch(() => {});
    }
  }
}
