import type { EventEmitter } from 'node:events';
import type { LockGuard } from '../lock/lock-results.js';
import type { CacheSettings } from '../options/cache.options.js';
import { currentFlight } from '../single-flight/flight-context.js';
import { CROSS_PROCESS, type SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import { keyHashOf, type CacheTrace, type FlightTrace } from '../telemetry/channels.js';
import type { BufferCacheEvents } from '../types/events.js';
import type { EntryStore } from './entry-store.js';

/** One build's value, and whether this process ran the factory for it. */
export interface Built {
  readonly value: unknown;
  readonly built: boolean;
}

export interface EntryBuilderParts {
  readonly engine: SingleFlightEngine;
  readonly entries: EntryStore;
  readonly now: () => number;
  readonly events: EventEmitter<BufferCacheEvents>;
  readonly onRedisError: 'proceed' | 'throw';
}

/** A lookup's or a refresh's trace: the key itself only with `traceKeys`. */
export function cacheTraceOf(
  key: string,
  lockKey: string,
  traceKeys: boolean,
  role?: CacheTrace['role'],
): CacheTrace {
  const keyHash = keyHashOf(lockKey);
  return traceKeys ? { keyHash, key, role } : { keyHash, role };
}

/** Builds an entry once across the fleet, under the key's lock; a woken waiter reads it instead. */
export class EntryBuilder {
  constructor(private readonly parts: EntryBuilderParts) {}

  /** `failed`: what a failed build does with the lock it held (the refresh's back-off). */
  async build(
    key: string,
    lockKey: string,
    factory: () => unknown,
    settings: CacheSettings,
    onBusy: 'wait' | 'skip',
    trace: CacheTrace,
    failed?: (guard: LockGuard) => Promise<void>,
  ): Promise<Built | undefined> {
    const { engine, entries, now, events, onRedisError } = this.parts;
    let payload: string | undefined;
    // Read again under the lock: another worker may have just written the entry.
    const fresh = async (): Promise<{ value: Built } | undefined> => {
      const entry = await entries.read(key, lockKey);
      return entry && now() < entry.freshUntil
        ? { value: { value: entry.value, built: false } }
        : undefined;
    };
    const work = async (): Promise<Built> => {
      const found = await fresh();
      if (found) return found.value;
      const value = await factory();
      const text = entries.encode(key, value, settings);
      // Without the lock no release follows: the entry is written here.
      if (currentFlight()?.locked) payload = text;
      else await entries.write(key, lockKey, text, settings);
      return { value, built: true };
    };
    const flight = {
      ttl: settings.lockTtl,
      lockTimeout: settings.lockTimeout,
      onBusy,
      share: false,
      onRedisError,
      maxHold: undefined,
    };
    const hooks = {
      peek: fresh,
      release: (guard: LockGuard) => entries.writeAndRelease(guard, key, payload, settings),
      failed,
    };
    const times: FlightTrace = { keyHash: trace.keyHash };
    let outcome: Built | undefined;
    try {
      outcome = (await engine[CROSS_PROCESS](key, lockKey, work, flight, hooks, times)) as
        Built | undefined;
    } finally {
      trace.waitMs = times.waitMs;
      trace.holdMs = times.holdMs;
    }
    trace.built = outcome?.built ?? false;
    if (outcome?.built) events.emit('built', key);
    else if (outcome && onBusy === 'wait') events.emit('shared', key);
    return outcome;
  }
}
