/**
 * Messages between the history run (test/fuzz/history.run.ts) and its worker processes (IPC), and
 * the key space both sides derive from a key's name.
 */
import type { RowValue } from './history-checker.js';

/**
 * The clock every process of the run records on, in ms: the machine's monotonic clock, which all
 * of its processes read alike. (`performance.timeOrigin` is fixed by each process as it starts,
 * and two processes' can disagree by more than the checker's 1 ms.)
 */
export const sharedClock = (): number => Number(process.hrtime.bigint()) / 1e6;

/** How a fleet is set up for one round: every worker alike. */
export interface FleetSetup {
  /** The cache's Redis. */
  readonly redisUrl: string;
  /** The source of truth's Redis (never faulted). */
  readonly sourceUrl: string;
  /** `namespace`; `cachePrefix` is the same followed by `c:`. */
  readonly namespace: string;
  /** The store: the built-in one on the cache's Redis, or Keyv (`@keyv/redis`) on it. */
  readonly store: 'built-in' | 'keyv';
  /** `l1.maxAge` in seconds, or none. */
  readonly l1MaxAge?: number;
  /** `writeReplicas.replicas`, or none. */
  readonly writeReplicas?: number;
  /** The ports of a Redis Cluster's nodes, when the cache's Redis is one (`redisUrl` unused). */
  readonly clusterPorts?: readonly number[];
}

/** One call of the cache the parent asks a worker to make. */
export type Call =
  /** `getOrSet`, `@Cached` (view `a` only) or `get` of `key`; the factory runs `buildMs`. */
  | { readonly call: 'getOrSet' | 'cached' | 'get'; readonly key: string; readonly buildMs: number }
  /** Bumps the key's row, then `set` (or `@CachePut`, views `a` and `c`) / `delete` of the key. */
  | { readonly call: 'set' | 'put' | 'delete'; readonly key: string }
  /** Bumps `row` when the tag is a row's, then `deleteByTag(tag)`. */
  | { readonly call: 'deleteByTag'; readonly tag: string }
  /** `@CacheEvict` methods that bump the row: `evictKeys` deletes its keys, `evictTag` its row tag. */
  | { readonly call: 'evictKeys' | 'evictTag'; readonly row: string };

export type HistoryCommand =
  | ({ readonly id: number; readonly cmd: 'open' } & FleetSetup)
  | ({ readonly id: number; readonly cmd: 'call' } & Call)
  /** The worst event-loop delay of the worker since the round opened. */
  | { readonly id: number; readonly cmd: 'lag' }
  /** The worker's `sharedClock()`, to measure how far its clock is from the run's. */
  | { readonly id: number; readonly cmd: 'clock' };

/** What a call did, on `sharedClock`. */
export interface CallRecord {
  readonly start: number;
  readonly end: number;
  readonly ok: boolean;
  /** A read's value (`null`: none). */
  readonly value?: RowValue | null;
  /** The row bumped and its new version. */
  readonly row?: string;
  readonly version?: number;
  /** The value a `set` or `@CachePut` stored. */
  readonly wrote?: RowValue;
  /** Why it failed (a rejected call). */
  readonly failure?: string;
}

export type HistoryReply =
  | { readonly ready: true; readonly pid: number }
  | { readonly id: number; readonly done: true }
  | { readonly id: number; readonly lagMs: number }
  | { readonly id: number; readonly clock: number }
  | ({ readonly id: number } & CallRecord)
  | { readonly id: number; readonly error: string };

/** Rows of the source of truth. */
export const ROWS: readonly string[] = ['r0', 'r1', 'r2', 'r3'];

/**
 * Views of a row: `a` tagged with the row and its group, long-lived; `b` tagged with the row,
 * fresh 1 s then stale 2 s (served while one worker refreshes it); `c` untagged, long-lived.
 */
export const VIEWS: readonly string[] = ['a', 'b', 'c'];

export interface KeySpec {
  readonly row: string;
  readonly view: string;
  readonly tags: readonly string[];
  readonly ttl: number;
  readonly grace: number;
}

export const keyOf = (row: string, view: string): string => `${row}:${view}`;

export const KEYS: readonly string[] = ROWS.flatMap((row) => VIEWS.map((v) => keyOf(row, v)));

export const groupOf = (row: string): string => `grp:${Number(row.slice(1)) % 2}`;

export const rowTag = (row: string): string => `row:${row}`;

export function keySpec(key: string): KeySpec {
  const [row, view] = key.split(':') as [string, string];
  if (view === 'a') return { row, view, tags: [rowTag(row), groupOf(row)], ttl: 30, grace: 0 };
  if (view === 'b') return { row, view, tags: [rowTag(row)], ttl: 1, grace: 2 };
  return { row, view, tags: [], ttl: 30, grace: 0 };
}

/** Every tag of the key space. */
export const TAGS: readonly string[] = [...new Set(KEYS.flatMap((key) => keySpec(key).tags))];

/** The keys that carry `tag`. */
export const keysTagged = (tag: string): string[] =>
  KEYS.filter((key) => keySpec(key).tags.includes(tag));

/** The keys `@CacheEvict` deletes for `row` (`evictKeys`: all of its views). */
export const rowKeys = (row: string): string[] => VIEWS.map((v) => keyOf(row, v));
