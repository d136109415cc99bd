import type { RedisScriptClient } from '../types/clients.js';
import { isConnected } from '../redis/connection-status.js';
import { releaseLock } from '../redis/release-lock.js';
import type { LockGuard } from './lock-results.js';

/** Most releases kept at once; more are dropped (their locks end by their TTL). */
const MAX_KEPT = 10_000;

/**
 * Releases that could not follow a failed acquire because the connection broke after the acquire
 * went out (it may have run, its reply lost with the connection). They are sent ahead of the
 * lock's next command once the client is connected again, for the locks whose TTL has not ended,
 * so that a lock taken for nobody does not block its key for the whole TTL. A release compares
 * the token: it never touches another holder's lock. Nothing is kept for a client that does not
 * say whether it is connected (ioredis's `status`), and nothing waits in the background.
 *
 * @example
 * ```ts
 * const unsent = new UnsentReleases(client, commands);
 * await unsent.sendIfConnected(); // before the next acquire
 * const wentOut = unsent.connected;
 * // the acquire failed, and the release behind it could not go out:
 * releaseLock(commands, guard.key, guard.token).catch(() => {
 *   if (wentOut && !unsent.connected) unsent.add(guard, ttlMs);
 * });
 * ```
 */
export class UnsentReleases {
  /** Token → the guard and when its lock ends at the latest. */
  private readonly kept = new Map<string, { guard: LockGuard; until: number }>();

  constructor(
    private readonly client: RedisScriptClient,
    private readonly commands: RedisScriptClient,
  ) {}

  /** Whether a command sent now goes out to Redis (ioredis `status` `'ready'`). */
  get connected(): boolean {
    return isConnected(this.client);
  }

  /** Keeps `guard`'s release, for at most `ttlMs`. */
  add(guard: LockGuard, ttlMs: number): void {
    if (this.kept.size < MAX_KEPT) this.kept.set(guard.token, { guard, until: Date.now() + ttlMs });
  }

  /**
   * Sends the kept releases if the client is connected, and resolves once they are answered; call
   * it before the lock's own commands. Nothing kept, or not connected: `undefined`, nothing to
   * wait for.
   */
  sendIfConnected(): Promise<unknown> | undefined {
    if (this.kept.size === 0 || !this.connected) return undefined;
    const now = Date.now();
    const due = [...this.kept.values()].filter(({ until }) => until > now);
    this.kept.clear();
    // Best effort again: one that fails now is left to its TTL.
    return Promise.allSettled(
      due.map(({ guard }) => releaseLock(this.commands, guard.key, guard.token)),
    );
  }
}
