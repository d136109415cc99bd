import type { BufferCacheStore } from './cache-store.js';

/** Ms between two attempts. */
const RETRY_MS = 250;
/** Keys tried at once; beyond it the one that expires first is given up (it expires anyway). */
const MAX_KEYS = 10_000;

/**
 * Deletes the values outdated builds wrote to a store of the user's. One the store refuses to
 * delete is tried again every 250 ms until the store takes it or the value has expired anyway,
 * and meanwhile read as a miss in this process: without it, it would be served until its `ttl`.
 */
export class RefusedDeletes {
  /** Store key → when its value expires (`now()` ms). */
  private readonly until = new Map<string, number>();
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly store: BufferCacheStore,
    private readonly now: () => number,
    /** Told of a refusal, once per value. */
    private readonly refused: (error: unknown) => void,
  ) {}

  /** Whether `storeKey` holds a value that is still to be deleted. */
  has(storeKey: string): boolean {
    return this.until.has(storeKey);
  }

  /** Deletes `storeKey`; refused, again until the store takes it, up to `expiresAt` (`now()` ms). */
  async delete(storeKey: string, expiresAt: number): Promise<void> {
    try {
      await this.store.delete(storeKey);
    } catch (error) {
      this.refused(error);
      this.retry(storeKey, expiresAt);
    }
  }

  private retry(storeKey: string, expiresAt: number): void {
    this.until.delete(storeKey);
    this.until.set(storeKey, expiresAt);
    if (this.until.size > MAX_KEYS) this.giveUpFirstExpiring();
    this.schedule();
  }

  /** A write of `storeKey` the store took: what it replaced needs no deleting. */
  settled(storeKey: string): void {
    this.until.delete(storeKey);
  }

  private giveUpFirstExpiring(): void {
    let first: [string, number] | undefined;
    for (const entry of this.until) if (!first || entry[1] < first[1]) first = entry;
    if (first) this.until.delete(first[0]);
  }

  private schedule(): void {
    if (this.timer !== undefined || this.until.size === 0) return;
    this.timer = setTimeout(() => void this.deleteAgain(), RETRY_MS);
    this.timer.unref();
  }

  private async deleteAgain(): Promise<void> {
    const now = this.now();
    for (const [storeKey, expiresAt] of this.until) {
      if (expiresAt <= now) {
        this.until.delete(storeKey);
        continue;
      }
      try {
        await this.store.delete(storeKey);
        // Unless it was refused again meanwhile, and is to be tried anew.
        if (this.until.get(storeKey) === expiresAt) this.until.delete(storeKey);
      } catch {
        // Told when first refused; tried again next round.
      }
    }
    this.timer = undefined;
    this.schedule();
  }
}
