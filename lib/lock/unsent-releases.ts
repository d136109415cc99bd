import type { RedisScriptClient } from '../types/clients.js';
import { isConnected } from '../redis/client.js';
import { releaseLock } from '../redis/lock-commands.js';
import type { LockGuard } from './lock-results.js';

/** Most releases kept at once; more are left to their TTL. */
const MAX_KEPT = 10_000;

/**
 * Releases that could not follow a failed acquire because the connection broke after the acquire
 * went out (it may have run, its reply lost). They go ahead of the next acquire once the client is
 * connected again, while their TTL lasts, so that a lock taken for nobody does not block its key.
 * Nothing is kept for a client that does not say whether it is connected (ioredis's `status`).
 */
export class UnsentReleases {
  private readonly kept = new Map<string, { guard: LockGuard; until: number }>();

  constructor(
    private readonly client: RedisScriptClient,
    private readonly commands: RedisScriptClient,
  ) {}

  get connected(): boolean {
    return isConnected(this.client);
  }

  add(guard: LockGuard, ttlMs: number): void {
    if (this.kept.size < MAX_KEPT) this.kept.set(guard.token, { guard, until: Date.now() + ttlMs });
  }

  /** `undefined` when there is nothing to wait for. */
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
