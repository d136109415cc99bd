import { randomBytes } from 'node:crypto';
import { publishToShard } from '../redis/plain-commands.js';
import {
  releaseSubscriberFor,
  type DuplicableClient,
  type Listening,
} from '../single-flight/release-subscriber.js';
import type { RedisScriptClient } from '../types/clients.js';

/** What a process hears on the bus: a key written or deleted, or tags given new versions. */
export type Invalidation =
  | { readonly kind: 'key'; readonly key: string }
  | { readonly kind: 'tags'; readonly tags: readonly string[]; readonly version: string }
  /** The subscription was lost, or a message could not be read: nothing known can be trusted. */
  | { readonly kind: 'all' };

export interface InvalidationBusParts {
  /** The shard channel every worker of the cache announces on. */
  readonly channel: string;
  readonly client: () => Promise<RedisScriptClient>;
}

const NOT_YET: Promise<boolean> = Promise.resolve(false);

/** A failed subscription is tried again this long after, at the earliest. */
const RETRY_MS = 1000;

/**
 * The announcements of the cache's writes, deletes and tag bumps, on one shard channel every
 * worker subscribes to (on a Cluster it lives on one shard, whatever the keys' slots). What a
 * process knows from it (copies, tag versions) is trusted only while it is subscribed (`coherent`):
 * when the subscriber fails or closes, every listener hears `all`, and again once subscribed.
 * `generation` counts what was heard: a read that began before an invalidation keeps nothing.
 */
export class InvalidationBus {
  private readonly listeners: ((heard: Invalidation) => void)[] = [];
  private subscribed = false;
  private current = 0;
  private listening: Listening | undefined;
  private retryAt = 0;
  /** Each worker's own announcements come back to it, and are ignored. */
  readonly origin: string = randomBytes(12).toString('base64url');

  constructor(private readonly parts: InvalidationBusParts) {}

  get channel(): string {
    return this.parts.channel;
  }

  /** Whether what was heard can be trusted now; subscribes on first use. */
  get coherent(): boolean {
    if (!this.subscribed) this.attach();
    return this.subscribed;
  }

  get generation(): number {
    return this.current;
  }

  /** Taken before a read; `undefined` while not coherent (then the read keeps nothing). */
  mark(): number | undefined {
    return this.coherent ? this.current : undefined;
  }

  onInvalidation(listener: (heard: Invalidation) => void): void {
    this.listeners.push(listener);
  }

  /** This process wrote or deleted `key`: told here at once, then to every other worker. */
  async announceKey(key: string): Promise<void> {
    this.tell({ kind: 'key', key });
    const { client, channel } = this.parts;
    await publishToShard(await client(), channel, `${this.origin}\nk${key}`);
  }

  /** What this process did itself (a tag bump answered by Redis): told here, as if heard. */
  tell(heard: Invalidation): void {
    this.current++;
    for (const listener of this.listeners) listener(heard);
  }

  private heard(text?: string): void {
    if (text === undefined) return this.lost();
    const end = text.indexOf('\n');
    if (end >= 0 && text.slice(0, end) === this.origin) return;
    const heard = end < 0 ? undefined : parse(text.slice(end + 1));
    this.tell(heard ?? { kind: 'all' });
  }

  private lost(): void {
    this.subscribed = false;
    this.tell({ kind: 'all' });
    const listening = this.listening;
    this.listening = undefined;
    listening?.close();
    this.retryAt = Date.now() + RETRY_MS;
  }

  private attach(): void {
    if (this.listening || Date.now() < this.retryAt) return;
    // Until the client is had, a placeholder that closes nothing.
    const pending: Listening = { ready: NOT_YET, close: () => {} };
    let listening: Listening | undefined;
    const closed = (): void => {
      if (this.listening === listening) this.lost();
    };
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
          // Whatever was heard before is from before the subscription: it counts as nothing.
          this.tell({ kind: 'all' });
          this.subscribed = true;
        },
        () => {
          if (this.listening === pending) this.lost();
        },
      );
    this.listening = pending;
  }
}

/** `k<key>`, or `t<tags as JSON>\n<version>` (written by the tag bump script). */
function parse(body: string): Invalidation | undefined {
  if (body.startsWith('k')) return { kind: 'key', key: body.slice(1) };
  if (!body.startsWith('t')) return undefined;
  const end = body.lastIndexOf('\n');
  try {
    const tags: unknown = JSON.parse(body.slice(1, end));
    const version = body.slice(end + 1);
    if (!Array.isArray(tags) || !tags.every((tag) => typeof tag === 'string') || version === '') {
      return undefined;
    }
    return { kind: 'tags', tags, version };
  } catch {
    return undefined;
  }
}
