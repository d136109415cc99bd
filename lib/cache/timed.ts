import type { CacheSettings } from '../options/cache.options.js';

/**
 * A factory's value with the seconds its maker chose for its entry, known only once it is made
 * (the interceptor's: a response's own freshness); what it leaves out is the call's.
 */
export class Timed {
  constructor(
    readonly value: unknown,
    readonly ttl: number | undefined,
    readonly grace: number | undefined,
  ) {}
}

/** The value to store, and the settings its entry is written with. */
export function timedOf(made: unknown, settings: CacheSettings): [unknown, CacheSettings] {
  if (!(made instanceof Timed)) return [made, settings];
  const { value, ttl = settings.ttl, grace = settings.grace } = made;
  return [value, { ...settings, ttl, grace }];
}
