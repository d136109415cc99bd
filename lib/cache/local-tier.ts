import { randomBytes } from 'node:crypto';
import type { L1OptionsDto } from '../options/l1.options.js';
import { publishToShard } from '../redis/plain-commands.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
  type Listening,
} from '../single-flight/release-subscriber.js';
import type { RedisScriptClient } from '../types/clients.js';

/** What a copy needs of an entry: the end of its servable life. */
interface Expiring {
  readonly staleUntil: number;
}

interface Held<E> {
  readonly entry: E;
  /** When this copy stops being served: `maxAge` after it was had, or the entry's end. */
  readonly until: number;
}

export interface LocalTierParts {
  readonly settings: Readonly<L1OptionsDto>;
  /** The shard channel every worker of the cache announces its writes on. */
  readonly channel: string;
  readonly client: () => Promise<RedisScriptClient>;
  readonly now: () => number;
  readonly publishFailed: (error: unknown) => void;
}

const NOT_YET: Promise<boolean> = Promise.resolve(false);

/** A failed subscription is tried again this long after, at the earliest. */
const RETRY_MS = 1000;

/**
 * Decoded entries kept in this process, least recently used out first, each served `maxAge` at
 * most. Every write or delete of an entry here drops the copy, then is announced on a shard
 * channel, whose messages drop the copies of every other worker. Copies are served only while
 * that channel is subscribed: when the subscriber fails or closes, every copy goes and none is
 * kept until it is subscribed again. A read that began before an invalidation keeps nothing
 * (`mark`), so that a value read before a write never outlives the write's announcement here.
 */
export class LocalTier<E extends Expiring> {
  private readonly held = new Map<string, Held<E>>();
  /** Counts invalidations and flushes: a read keeps its entry only if none came while it ran. */
  private generation = 0;
  private coherent = false;
  private listening: Listening | undefined;
  private retryAt = 0;
  /** Each tier's own announcements come back to it, and are ignored. */
  private readonly origin = randomBytes(12).toString('base64url');
  private readonly maxAgeMs: number;

  constructor(private readonly parts: LocalTierParts) {
    this.maxAgeMs = parts.settings.maxAge * 1000;
  }

  /** The copy of `key` while it may be served, else `undefined`. */
  get(key: string, now: number): E | undefined {
    if (!this.coherent) {
      this.attach();
      return undefined;
    }
    const held = this.held.get(key);
    if (held === undefined) return undefined;
    this.held.delete(key);
    if (now >= held.until) return undefined;
    this.held.set(key, held);
    return held.entry;
  }

  /** Taken before a read of the store; `put` keeps its entry only if nothing was invalidated since. */
  mark(): number | undefined {
    if (!this.coherent) {
      this.attach();
      return undefined;
    }
    return this.generation;
  }

  put(key: string, entry: E, mark: number | undefined, now: number): void {
    if (mark !== this.generation || !this.coherent) return;
    const until = Math.min(now + this.maxAgeMs, entry.staleUntil);
    if (until <= now) return;
    this.held.delete(key);
    this.held.set(key, { entry, until });
    if (this.held.size > this.parts.settings.maxEntries) {
      this.held.delete(this.held.keys().next().value!);
    }
  }

  /**
   * After this process wrote or deleted `key` in the store: drops the copy here, tells every
   * other worker to drop theirs, then keeps `entry` (what was written) when nothing came between.
   */
  async written(key: string, entry?: E): Promise<void> {
    this.invalidate(key);
    const mark = this.generation;
    const { client, channel, publishFailed } = this.parts;
    try {
      await publishToShard(await client(), channel, `${this.origin}\n${key}`);
    } catch (error) {
      publishFailed(error);
      return;
    }
    if (entry) this.put(key, entry, mark, this.parts.now());
  }

  private invalidate(key: string): void {
    this.generation++;
    this.held.delete(key);
  }

  private heard(text?: string): void {
    if (text === undefined) return this.lost();
    const end = text.indexOf('\n');
    if (end < 0) {
      // No announcement of ours: what it means is unknown, so nothing held is trusted.
      this.generation++;
      this.held.clear();
      return;
    }
    if (text.slice(0, end) !== this.origin) this.invalidate(text.slice(end + 1));
  }

  /** The subscription is gone or may have missed a message: nothing held can be trusted. */
  private lost(): void {
    this.coherent = false;
    this.generation++;
    this.held.clear();
    const listening = this.listening;
    this.listening = undefined;
    listening?.close();
    this.retryAt = Date.now() + RETRY_MS;
  }

  private attach(): void {
    if (this.listening || Date.now() < this.retryAt) return;
    // Until the client is had, a placeholder that closes nothing.
    const pending: Listening = { ready: NOT_YET, close: () => {} };
    const closed = (): void => {
      if (this.listening === listening) this.lost();
    };
    let listening: Listening | undefined;
    void this.parts
      .client()
      .then((client) => {
        if (this.listening !== pending) return;
        const subscriber = releaseSubscriberFor(client as unknown as DuplicableClient);
        listening = subscriber.listen(
          this.parts.channel,
          (text) => {
            if (this.listening === listening) this.heard(text);
          },
          undefined,
          closed,
        );
        this.listening = listening;
        return listening.ready;
      })
      .then(
        (ok) => {
          if (this.listening !== listening || listening === undefined) return;
          if (!ok) return this.lost();
          this.generation++;
          this.coherent = true;
        },
        () => {
          if (this.listening === pending) this.lost();
        },
      );
    this.listening = pending;
  }
}
