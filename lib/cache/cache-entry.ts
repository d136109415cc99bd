import { LockError } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import {
  UnserializableValueError,
  type ResultSerializer,
} from '../serialization/result-serializer.js';
import { errorText } from '../messages/error-text.js';

/**
 * One cached value with its own freshness: fresh until `freshUntil`, servable until `staleUntil`.
 *
 * @example
 * ```ts
 * const now = Date.now();
 * const entry: CacheEntry = { value: report, freshUntil: now + 60_000, staleUntil: now + 660_000 };
 * ```
 */
export interface CacheEntry {
  readonly value: unknown;
  /** Epoch ms until which the entry is served as it is, with no lock. */
  readonly freshUntil: number;
  /** Epoch ms until which the entry may be served stale while it is refreshed. */
  readonly staleUntil: number;
}

// `freshUntil:staleUntil:payload`: the serializer sees the value alone, so what it reports (and
// where) is the user's value, and the times cost no serializer work.
const SEPARATOR = ':';

/**
 * The text stored for `value`. Throws the catalog's `cache_value_unserializable` error when the
 * serializer cannot represent it; nothing is stored then.
 *
 * @example
 * ```ts
 * const text = encodeEntry(JSON_RESULT_SERIALIZER, messages, 'report:1', entry);
 * await store.set('report:1', text, entry.staleUntil - Date.now());
 * ```
 */
export function encodeEntry(
  serializer: ResultSerializer,
  messages: BufferLockMessages,
  cacheKey: string,
  entry: CacheEntry,
): string {
  let payload: string;
  try {
    payload = serializer.serialize(entry.value);
  } catch (error) {
    const problem =
      error instanceof UnserializableValueError
        ? error.problem
        : { what: errorText(error), path: '$' };
    const text = messages.render('cache_value_unserializable', {
      KEY: cacheKey,
      WHAT: problem.what,
      PATH: problem.path,
    });
    throw new LockError('cache_value_unserializable', text, { cause: error });
  }
  return `${entry.freshUntil}${SEPARATOR}${entry.staleUntil}${SEPARATOR}${payload}`;
}

/**
 * The entry in `text`. Throws when it is not one (another program's value under the key).
 *
 * @example
 * ```ts
 * const text = await store.get('report:1');
 * const entry = typeof text === 'string' ? decodeEntry(JSON_RESULT_SERIALIZER, text) : undefined;
 * ```
 */
export function decodeEntry(serializer: ResultSerializer, text: unknown): CacheEntry {
  if (typeof text !== 'string') throw new TypeError('not a cache entry');
  const first = text.indexOf(SEPARATOR);
  const second = text.indexOf(SEPARATOR, first + 1);
  const freshUntil = Number(text.slice(0, first));
  const staleUntil = Number(text.slice(first + 1, second));
  if (first < 0 || second < 0 || !Number.isFinite(freshUntil) || !Number.isFinite(staleUntil)) {
    throw new TypeError('not a cache entry');
  }
  return { value: serializer.deserialize(text.slice(second + 1)), freshUntil, staleUntil };
}
