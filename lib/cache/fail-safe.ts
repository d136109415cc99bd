import type { EventEmitter } from 'node:events';
import type { CacheSettings } from '../options/cache.options.js';
import type { CacheTrace } from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import type { EntryBuilder } from './entry-builder.js';
import type { CacheEntry, EntryStore, Found } from './entry-store.js';
import type { CacheLookup } from './shared-lookups.js';

/** A call for a key's value, and when it began (`moment()`): what it may take (`Built.asOf`). */
export interface Asked<T> {
  readonly key: string;
  readonly lockKey: string;
  readonly factory: () => T | Promise<T>;
  readonly settings: CacheSettings;
  readonly asked: number;
}

/** A lookup that found no entry it may serve. */
export interface Missed<T> extends Asked<T> {
  readonly trace: CacheTrace;
  readonly found: Found;
  readonly retries: number;
}

export interface FailSafeParts {
  readonly builder: EntryBuilder;
  readonly entries: EntryStore;
  readonly events: EventEmitter<BufferCacheEvents>;
  readonly now: () => number;
}

/**
 * The lookup of an entry past its grace, kept for `staleIfError`: a miss that is rebuilt, and
 * served if the rebuild fails (the failure logged and backed off by the build), read again first
 * so that nothing deleted or replaced meanwhile is served. While the key backs off from a failure
 * it is served with no try. The call's event is the answer's: `miss`, or `stale` when served.
 */
export async function failSafeLookup<T>(
  parts: FailSafeParts,
  call: Pick<Missed<T>, 'key' | 'lockKey' | 'settings' | 'trace' | 'found'> & {
    readonly entry: CacheEntry;
  },
  rebuild: () => Promise<CacheLookup<Awaited<T>>>,
): Promise<CacheLookup<Awaited<T>>> {
  const { builder, entries, events, now } = parts;
  const { key, lockKey, settings, trace } = call;
  let served: CacheEntry | undefined = call.entry;
  let readAt = call.found.readAt;
  if (!(await builder.backingOff(lockKey))) {
    try {
      const answer = await rebuild();
      events.emit('miss', key);
      return answer;
    } catch (error) {
      // A read of its own, begun after the failure: a write that returned before it is seen.
      ({ entry: served, readAt } = await entries.lookup(key, lockKey));
      if (!served || now() >= served.staleUntil + settings.staleIfError * 1000) throw error;
    }
  }
  // Another worker may have built it meanwhile: then it is fresh.
  const status = now() < served.freshUntil ? 'miss' : 'stale';
  trace.role = status;
  events.emit(status, key);
  return { value: served.value as Awaited<T>, status, asOf: readAt };
}
