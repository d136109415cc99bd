import { releaseLock } from '../redis/lock-commands.js';
import type { RedisScriptClient } from '../types/clients.js';
import type { LockGuard } from './lock-results.js';

/** How long the releases sent at shutdown may take, past its `shutdownTimeout`. */
export const FINAL_RELEASE_MS = 1000;
/** Adds between two sweeps of held locks whose ttl ran out (a guard its holder never released). */
const SWEEP_EVERY = 1024;

interface Held {
  readonly key: string;
  readonly token: string;
  until: number;
}

/**
 * The locks this process holds, and its lock commands under way: what shutdown waits for, then
 * releases. A lock left to expire is forgotten once its ttl has run out.
 */
export class HeldLocks {
  private readonly held = new Map<string, Held>();
  /** Tokens released by the shutdown itself: their holders' late release or extend sends nothing. */
  private readonly abandoned = new Set<string>();
  private adds = 0;
  private busy = 0;
  private idle: (() => void) | undefined;
  /** No new lock is taken. */
  closing = false;

  hold(guard: LockGuard, ttlMs: number): void {
    this.held.set(guard.token, { key: guard.key, token: guard.token, until: Date.now() + ttlMs });
    if (++this.adds >= SWEEP_EVERY) this.sweep();
  }

  extended(token: string, ttlMs: number): void {
    const held = this.held.get(token);
    if (held) held.until = Date.now() + ttlMs;
  }

  /** A release of `token` is sent: the lock is no longer this process's to release. */
  released(token: string): void {
    this.held.delete(token);
  }

  wasAbandoned(token: string): boolean {
    return this.abandoned.size > 0 && this.abandoned.has(token);
  }

  /** A lock command goes out; `done()` once it answered. */
  start(): void {
    this.busy++;
  }

  done(): void {
    this.busy--;
    if (this.idle && this.isIdle()) this.idle();
  }

  /**
   * Waits until every lock held was released and no command is under way, for `timeoutMs` at
   * most (less when every lock left expires sooner), then releases the locks still held through
   * `client()`, for FINAL_RELEASE_MS at most. Resolves to how many it released.
   */
  async drain(timeoutMs: number, client: () => RedisScriptClient | undefined): Promise<number> {
    this.sweep();
    if (!this.isIdle()) {
      let latest = Date.now();
      for (const { until } of this.held.values()) latest = Math.max(latest, until);
      const waitMs = this.held.size > 0 ? Math.min(timeoutMs, latest - Date.now()) : timeoutMs;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, waitMs));
        this.idle = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.idle = undefined;
    }
    this.sweep();
    const left = [...this.held.values()];
    this.held.clear();
    for (const { token } of left) this.abandoned.add(token);
    const commands = client();
    if (left.length === 0 || !commands) return left.length;
    let timer: NodeJS.Timeout | undefined;
    const releases = Promise.allSettled(
      left.map(({ key, token }) => releaseLock(commands, key, token)),
    );
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, FINAL_RELEASE_MS)));
    await Promise.race([releases, late]).finally(() => clearTimeout(timer));
    return left.length;
  }

  private isIdle(): boolean {
    return this.busy === 0 && this.held.size === 0;
  }

  private sweep(): void {
    this.adds = 0;
    const now = Date.now();
    for (const [token, { until }] of this.held) if (until <= now) this.held.delete(token);
  }
}
