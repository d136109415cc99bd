import type { L1OptionsDto } from '../options/l1.options.js';
import type { InvalidationBus } from './invalidation-bus.js';

/** What a copy needs of an entry: the end of its servable life. */
interface Expiring {
  readonly staleUntil: number;
}

interface Held<E> {
  readonly entry: E;
  /** When this copy stops being served: `maxAge` after it was had, or the entry's end. */
  readonly until: number;
}

/**
 * Decoded entries kept in this process, least recently used out first, each served `maxAge` at
 * most, and only while the bus is coherent: a key heard on it drops its copy, a lost subscription
 * every copy. A read keeps its entry only if nothing was heard since its `mark`, so that a value
 * read before a write never outlives the write's announcement here.
 */
export class LocalTier<E extends Expiring> {
  private readonly held = new Map<string, Held<E>>();
  private readonly maxAgeMs: number;

  constructor(
    private readonly bus: InvalidationBus,
    private readonly settings: Readonly<L1OptionsDto>,
  ) {
    this.maxAgeMs = settings.maxAge * 1000;
    bus.onInvalidation((heard) => {
      if (heard.kind === 'key') this.held.delete(heard.key);
      else if (heard.kind === 'all') this.held.clear();
    });
  }

  /** The copy of `key` while it may be served, else `undefined`. */
  get(key: string, now: number): E | undefined {
    if (!this.bus.coherent) return undefined;
    const held = this.held.get(key);
    if (held === undefined) return undefined;
    this.held.delete(key);
    if (now >= held.until) return undefined;
    this.held.set(key, held);
    return held.entry;
  }

  put(key: string, entry: E, mark: number | undefined, now: number): void {
    if (mark === undefined || mark !== this.bus.generation || !this.bus.coherent) return;
    const until = Math.min(now + this.maxAgeMs, entry.staleUntil);
    if (until <= now) return;
    this.held.delete(key);
    this.held.set(key, { entry, until });
    if (this.held.size > this.settings.maxEntries) {
      this.held.delete(this.held.keys().next().value!);
    }
  }
}
