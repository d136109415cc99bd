import { LockError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { CacheSettings } from '../options/cache.options.js';
import { toMilliseconds } from '../options/seconds.js';
import {
  UnserializableValueError,
  type ResultSerializer,
} from '../serialization/result-serializer.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';
import { TAG_KEEP_MS, type TagStamp } from './tag-versions.js';

/** One cached value: fresh until `freshUntil`, servable stale until `staleUntil` (epoch ms). */
export interface CacheEntry {
  readonly value: unknown;
  readonly freshUntil: number;
  readonly staleUntil: number;
  /** How long its build took, for `earlyRefresh`; `0` for a `set()`. */
  readonly deltaMs: number;
  /** The versions of its tags when it was built; none when it has no tags. */
  readonly tags?: readonly TagStamp[];
}

export interface EntryCodecParts {
  readonly serializer: ResultSerializer;
  readonly messages: BufferLockMessages;
  readonly log: ThrottledLog;
  readonly now: () => number;
}

/**
 * An entry as the text the store keeps: `freshUntil:staleUntil:deltaMs:keyLength:key payload`, or
 * with tags `…:deltaMs;length:keyLength:key[[tag, version], …]payload`. The serializer sees the
 * user's value alone; the key is read back, so that a store (or client) that answers a read with
 * another key's entry is a miss, never another key's value.
 */
export class EntryCodec {
  constructor(private readonly parts: EntryCodecParts) {}

  encode(
    key: string,
    value: unknown,
    settings: CacheSettings,
    deltaMs = 0,
    stamps: readonly TagStamp[] = [],
  ): string {
    const { messages, now, serializer } = this.parts;
    let payload: string;
    try {
      payload = serializer.serialize(value);
    } catch (error) {
      const { what, path } =
        error instanceof UnserializableValueError
          ? error.problem
          : { what: errorText(error), path: '$' };
      const text = messages.render('cache_value_unserializable', {
        KEY: key,
        WHAT: what,
        PATH: path,
      });
      throw new LockError('cache_value_unserializable', text, { cause: error });
    }
    // A UTF-8 byte is at most 3 per UTF-16 unit: a short payload is not measured.
    const max = settings.maxValueBytes;
    const bytes = payload.length * 3 > max ? Buffer.byteLength(payload) : 0;
    if (bytes > max) {
      const text = messages.render('cache_value_too_large', { KEY: key, BYTES: bytes, MAX: max });
      throw new LockError('cache_value_too_large', text);
    }
    const freshUntil = now() + toMilliseconds(settings.ttl);
    const head = `${freshUntil}:${freshUntil + settings.grace * 1000}:${deltaMs}`;
    if (stamps.length === 0) return `${head}:${key.length}:${key}${payload}`;
    const tags = JSON.stringify(stamps);
    return `${head};${tags.length}:${key.length}:${key}${tags}${payload}`;
  }

  /** `value` as a hit would return it. */
  roundTrip(key: string, value: unknown, settings: CacheSettings): unknown {
    return this.decode(this.encode(key, value, settings), key).value;
  }

  /** A stored text as the entry of `key`; an unreadable one, or another key's, is a miss, logged. */
  stored(text: unknown, key: string): CacheEntry | undefined {
    if (text === undefined || text === null) return undefined;
    try {
      return this.decode(text, key);
    } catch (error) {
      const line = this.parts.messages.render('cache_entry_unreadable', {
        ERROR: errorText(error),
      });
      this.parts.log.warn('cache_entry_unreadable', line);
      return undefined;
    }
  }

  decode(text: unknown, key: string): CacheEntry {
    const head = typeof text === 'string' ? ENTRY_HEAD.exec(text) : null;
    const [freshUntil, staleUntil, deltaMs] = (head ?? []).slice(1, 4).map(Number) as number[];
    if (!head || ![freshUntil, staleUntil, deltaMs].every(Number.isFinite)) {
      throw new TypeError('not a cache entry');
    }
    const start = head[0].length;
    if (Number(head[5]) !== key.length || !(text as string).startsWith(key, start)) {
      throw new TypeError("another key's entry");
    }
    const body = (text as string).slice(start + key.length);
    const tagsLength = head[4] === undefined ? 0 : Number(head[4]);
    const tags = tagsLength > 0 ? stampsOf(body.slice(0, tagsLength)) : undefined;
    const value = this.parts.serializer.deserialize(body.slice(tagsLength));
    const entry = { value, freshUntil: freshUntil!, staleUntil: staleUntil!, deltaMs: deltaMs! };
    return tags ? { ...entry, tags } : entry;
  }
}

const ENTRY_HEAD = /^([^:]+):([^:]+):([^:;]+)(?:;(\d+))?:(\d+):/;

const isStamp = (s: unknown): boolean =>
  Array.isArray(s) && s.length === 2 && s.every((part) => typeof part === 'string');

function stampsOf(text: string): readonly TagStamp[] {
  const stamps: unknown = JSON.parse(text);
  if (!Array.isArray(stamps) || !stamps.every(isStamp)) throw new TypeError('not a cache entry');
  return stamps as TagStamp[];
}

/**
 * How long the store keeps an entry: fresh, servable stale, then kept for a failed rebuild
 * (`staleIfError`); a tagged one, `TAG_KEEP_MS` at most.
 */
export const ttlMsOf = (settings: CacheSettings): number => {
  const ms = toMilliseconds(settings.ttl + settings.grace + settings.staleIfError);
  return settings.tags.length > 0 ? Math.min(ms, TAG_KEEP_MS) : ms;
};
