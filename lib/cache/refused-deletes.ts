import type { BufferCacheStore } from './cache-store.js';

/** Ms between two attempts. */
const RETRY_MS = 250;
/** Keys tried at once; beyond it the one that expires first is given up (it expires anyway). */
const MAX_KEYS = 10_000;

/**
 * Values an outdated build wrote to a store of the user's whose deletion the store refused: tried
 * again every 250 ms until the store takes it or the value has expired anyway, and meanwhile read
 * as misses in this process. Without it such a value would be served until its `ttl`.
 */
export class RefusedDeletes {
  /** Store key → when its value expires (`now()` ms). */
  private readonly until = new Map<string, number>();
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly store: BufferCacheStore,
    private readonly now: () => number,
  ) {}

  /** Whether `storeKey` holds a value that is still to be deleted. */
  has(storeKey: string): boolean {
    return this.until.size > 0 && this.until.has(storeKey);
  }

  /** Deletes `storeKey` again until the store takes it, up to `expiresAt` (`now()` ms). */
  add(storeKey: string, expiresAt: number): void {
    this.until.delete(storeKey);
    this.until.set(storeKey, expiresAt);
    if (this.until.size > MAX_KEYS) this.giveUpFirstExpiring();
    this.schedule();
  }

  /** A write of `storeKey` the store took: what it replaced needs no deleting. */
  settled(storeKey: string): void {
    if (this.until.size > 0) this.until.delete(storeKey);
  }

  private giveUpFirstExpiring(): void {
    let first: [string, number] | undefined;
    for (const entry of this.until) if (!first || entry[1] < first[1]) first = entry;
    if (first) this.until.delete(first[0]);
  }

  private schedule(): void {
    if (this.timer !== undefined || this.until.size === 0) return;
    this.timer = setTimeout(() => void this.retry(), RETRY_MS);
    this.timer.unref();
  }

  private async retry(): Promise<void> {
    const now = this.now();
    for (const [storeKey, expiresAt] of this.until) {
      if (expiresAt <= now) {
        this.until.delete(storeKey);
        continue;
      }
      try {
        await this.store.delete(storeKey);
        // Unless it was refused again meanwhile, and added anew.
        if (this.until.get(storeKey) === expiresAt) this.until.delete(storeKey);
      } catch {
        // Logged when first refused; tried again next round.
      }
    }
    this.timer = undefined;
    this.schedule();
  }
}
