import type { CacheSettings } from '../options/cache.options.js';

/** One lookup's value and how it was had (the interceptor's `X-Cache`). */
export interface CacheLookup<T> {
  readonly value: T;
  readonly status: 'hit' | 'miss' | 'stale';
  /** Which joined calls may take it (see `Built.asOf`); a hit's: those before its read's answer. */
  readonly asOf: number;
}

/** A lookup under way, and the settings it runs with. */
interface Running {
  readonly settings: CacheSettings;
  readonly outcome: Promise<CacheLookup<unknown>>;
}

/**
 * The lookups under way in this process, by lock key: a call of the key with the same settings
 * takes the outcome of the one under way, so a stampede's callers in a process cost a promise
 * each. A write of the key in this process detaches them: a call after it starts afresh.
 */
export class SharedLookups {
  private readonly running = new Map<string, Running>();

  /** The outcome under way for `lockKey` with these settings, if any. */
  under(lockKey: string, settings: CacheSettings): Promise<CacheLookup<unknown>> | undefined {
    const running = this.running.get(lockKey);
    return running?.settings === settings ? running.outcome : undefined;
  }

  share(lockKey: string, settings: CacheSettings, outcome: Promise<CacheLookup<unknown>>): void {
    this.running.set(lockKey, { settings, outcome });
    const forget = (): void => {
      if (this.running.get(lockKey)?.outcome === outcome) this.running.delete(lockKey);
    };
    outcome.then(forget, forget);
  }

  /** A write of `lockKey`'s key returned: no later call takes what began before it. */
  detach(lockKey: string): void {
    this.running.delete(lockKey);
  }

  /** Tags were given new versions: no later call takes a lookup of an entry carrying one. */
  detachTagged(tags: readonly string[]): void {
    for (const [lockKey, { settings }] of this.running) {
      if (settings.tags.some((tag) => tags.includes(tag))) this.running.delete(lockKey);
    }
  }
}
