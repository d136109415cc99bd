import { randomBytes } from 'node:crypto';
import { bumpTags, getValues, stampTags } from '../redis/plain-commands.js';
import type { RedisScriptClient } from '../types/clients.js';
import type { CacheWriter } from './cache-writer.js';
import type { InvalidationBus } from './invalidation-bus.js';

/** A tag and the version it had when an entry was built: the entry is valid while it still has. */
export type TagStamp = readonly [tag: string, version: string];

export interface TagVersionsParts {
  readonly bus: InvalidationBus;
  readonly client: () => Promise<RedisScriptClient>;
  /** Where a bump goes. */
  readonly writer: CacheWriter;
  /** Before the hash tag of the bus's slot: `cachePrefix`. */
  readonly prefix: string;
  readonly now: () => number;
  /** How long a version heard or read is trusted without reading it again (ms). */
  readonly trustMs: number;
}

/** Seconds a version is trusted without `l1` (with it, its `maxAge`). */
export const DEFAULT_TRUST_SECONDS = 5;

/** Tags whose versions are remembered at most; the oldest goes first. */
const MAX_KNOWN = 10_000;
/**
 * A tag's key lives this long after its last bump or stamp, and a tagged entry no longer (a
 * missing key makes every entry that carries the tag a miss: a rebuild, never a stale answer).
 */
export const TAG_KEEP_MS = 7 * 24 * 3600 * 1000;

/** 16 random bytes: a version no tag has had in the life of the deployment, whatever Redis lost. */
const newVersion = (): string => randomBytes(16).toString('base64url');

/**
 * The versions of tags. `deleteByTag` gives each tag a new version (one script, whatever the
 * number of entries that carry it); an entry carries the versions its build started with, and is
 * a miss once one has changed or its key is gone. Versions are random, never counted: a lost key
 * is given a new one, which no entry carries. Versions heard on the bus or read are remembered for
 * `trustMs`, while the bus is coherent: a read of a tagged entry then costs no round trip more.
 */
export class TagVersions {
  private readonly known = new Map<string, { version: string; until: number }>();

  constructor(private readonly parts: TagVersionsParts) {
    parts.bus.onInvalidation((heard) => {
      if (heard.kind === 'all') this.known.clear();
      if (heard.kind !== 'tags') return;
      for (const tag of heard.tags) this.remember(tag, heard.version, parts.now());
    });
  }

  /** Whether every stamp still holds; `undefined` when that cannot be told without a read. */
  check(stamps: readonly TagStamp[]): boolean | undefined {
    if (!this.parts.bus.coherent) return undefined;
    const now = this.parts.now();
    let valid = true;
    for (const [tag, version] of stamps) {
      const known = this.known.get(tag);
      if (known === undefined || now >= known.until) return undefined;
      if (known.version !== version) valid = false;
    }
    return valid;
  }

  /**
   * Whether every stamp still holds, reading the versions not known (all of them `fromRedis`: a
   * bump in another worker may not have been heard yet); a missing key has changed.
   */
  async verify(stamps: readonly TagStamp[], fromRedis = false): Promise<boolean> {
    const valid = fromRedis ? undefined : this.check(stamps);
    if (valid !== undefined) return valid;
    const { bus, client, now } = this.parts;
    const tags = stamps.map(([tag]) => tag);
    const mark = bus.mark();
    const at = now();
    const read = await getValues(await client(), tags.map(this.keyOf));
    tags.forEach((tag, i) => {
      const version = read[i];
      // A lost key is given a new version by the next stamp: what was known of it is no more.
      if (version === null) this.known.delete(tag);
      else if (mark !== undefined && mark === bus.generation) this.remember(tag, version, at);
    });
    return stamps.every(([, version], i) => read[i] === version);
  }

  /** The versions to stamp an entry with (read before its value is made). */
  async current(tags: readonly string[]): Promise<TagStamp[]> {
    const { bus, client, now } = this.parts;
    const mark = bus.mark();
    const at = now();
    if (mark !== undefined) {
      const known = tags.map((tag) => this.known.get(tag));
      if (known.every((k) => k !== undefined && at < k.until)) {
        return tags.map((tag, i) => [tag, known[i]!.version]);
      }
    }
    const message = `${bus.origin}\nt`;
    const keys = tags.map(this.keyOf);
    const redis = await client();
    const versions = await stampTags(
      redis,
      keys,
      tags,
      newVersion(),
      TAG_KEEP_MS,
      bus.channel,
      message,
    );
    // Kept only if nothing was heard meanwhile: a bump heard may be newer than what was read.
    if (mark !== undefined && mark === bus.generation) {
      tags.forEach((tag, i) => this.remember(tag, versions[i]!, at));
    }
    return tags.map((tag, i) => [tag, versions[i]!]);
  }

  /** New versions for `tags`, told to every worker: each entry that carries one is a miss. */
  async bump(tags: readonly string[]): Promise<void> {
    const { bus, writer } = this.parts;
    const message = `${bus.origin}\nt${JSON.stringify(tags)}\n`;
    const version = newVersion();
    const keys = tags.map(this.keyOf);
    await writer.run(keys[0]!, (client) =>
      bumpTags(client, keys, version, TAG_KEEP_MS, bus.channel, message),
    );
    bus.tell({ kind: 'tags', tags, version });
  }

  private readonly keyOf = (tag: string): string =>
    `${this.parts.prefix}{nestjs-buffer-lock}:tag:${tag}`;

  private remember(tag: string, version: string, now: number): void {
    this.known.delete(tag);
    this.known.set(tag, { version, until: now + this.parts.trustMs });
    if (this.known.size > MAX_KNOWN) this.known.delete(this.known.keys().next().value!);
  }
}
