/**
 * The cache's first promise, checked over a recorded history, in the manner of Jepsen's checkers:
 * what was deleted or replaced is not served again. Every call has a start and an end on one clock
 * shared by the processes of the run (the machine's monotonic clock, `sharedClock`). A read is
 * stale when it returns a value that an invalidation which RETURNED before the read began had
 * superseded: the source row's version it carries is older than the one the invalidation wrote, or
 * the value was made before the invalidation began (a build that read the source earlier, a `set`
 * that ended earlier), unless it carries the version the invalidation wrote or a later one (it was
 * then made after the invalidation began, whatever the clocks recorded). Calls that overlap an
 * invalidation may return either side of it.
 *
 * Exceptions are allowed by name, each within its documented bound; everything else is a
 * violation:
 * - `l1-max-age-under-fault`: the reading process keeps `l1` copies, is not the one that
 *   invalidated (that one drops its own copy at once), a fault (subscriber loss,
 *   paused or restarted Redis, ...) was under way while the invalidation ran, and the read began
 *   within `l1.maxAge` of the invalidation's end: the announcement may have been lost, and `maxAge`
 *   bounds how long a copy is served.
 * - `tag-versions-trusted-under-fault`: the same for a tag bump and the tag versions a process
 *   trusts without reading them again (`l1.maxAge`, else 5 s).
 * - `in-flight-to-reader` (only with `deliveryMs` > 0): a read in another process that began
 *   within `deliveryMs` of the invalidation's end: what Redis had sent that process before the
 *   invalidation (the reply to a read the call shared, a wake-up) or with it (the `l1`
 *   announcement) may not have been handled there yet. The run gives the worst event-loop delay
 *   its processes had, plus a round trip.
 * - `outdated-build-on-own-store` (only with `ownStore`): the entries live in a store of the
 *   user's, so a build writes its value there before its release can find it outdated; it then
 *   deletes it, before its own call returns. A read of a build's value that began before the
 *   calls waiting on that build had returned is within that window.
 * - `outdated-build-in-l1-under-fault` (only with `ownStore`): a process with `l1` that read such
 *   a value in that window may keep a copy; the build's deletion is announced to every `l1` as it
 *   returns, and a fault under way then may hide it from the reader: a read of the build's value
 *   that began within the reader's `l1.maxAge` of the build's end.
 */

/** A value as the run's factories and writers make it. */
export interface RowValue {
  /** The source-of-truth row it was made from. */
  readonly row: string;
  /** The row's version it carries. */
  readonly version: number;
  /** Unique in the run. */
  readonly id: string;
  /** `build`: a factory made it; `write`: a `set` or `@CachePut` call (its record has `wrote`). */
  readonly origin: 'build' | 'write';
  /** A factory's value: when the factory began, before it read the source (shared clock, ms). */
  readonly madeAt: number;
}

interface Timed {
  /** The worker process that made the call. */
  readonly process: number;
  /** Shared clock, ms. */
  readonly start: number;
  readonly end: number;
}

/** A call that returned a value, or none (`null`). Calls that failed are not recorded as reads. */
export interface Read extends Timed {
  readonly kind: 'read';
  readonly call: string;
  readonly key: string;
  readonly value: RowValue | null;
}

/** A call that invalidates `keys`: a delete, a set, a tag bump, `@CacheEvict`, `@CachePut`. */
export interface Invalidation extends Timed {
  readonly kind: 'invalidation';
  readonly call: string;
  /** Every key whose entry it invalidates (for a tag, every key that carries the tag). */
  readonly keys: readonly string[];
  /** Whether the call removes tag versions' trust (a `deleteByTag`, or `@CacheEvict` with tags). */
  readonly tags: boolean;
  /** The row it bumped and the version it bumped it to, if it bumped one. */
  readonly row?: string;
  readonly version?: number;
  /** The value it stored, for a `set` or `@CachePut`. */
  readonly wrote?: RowValue;
  /** Whether the call returned (a rejected one promised nothing). */
  readonly ok: boolean;
}

/** A fault injected into the cache's Redis, from the start of its injection to its repair. */
export interface Fault {
  readonly kind: string;
  readonly start: number;
  readonly end: number;
}

export type Operation = Read | Invalidation;

export interface History {
  readonly operations: readonly Operation[];
  readonly faults: readonly Fault[];
}

export interface CheckerConfig {
  /** `l1.maxAge` (ms) of each process that keeps copies, by process; absent: no `l1`. */
  readonly l1MaxAgeMs: Readonly<Record<number, number | undefined>>;
  /** How long a process trusts a tag version without `l1` (ms); the library's 5 s. */
  readonly tagTrustMs: number;
  /** How long after a fault's repair the clients may still be reconnecting (ms). */
  readonly recoveryMs: number;
  /** Error of the shared clock between processes (ms): closer calls count as overlapping. */
  readonly clockSkewMs: number;
  /** See `in-flight-to-reader`; 0 allows none. */
  readonly deliveryMs: number;
  /** The entries live in a store of the user's: see `outdated-build-on-own-store`. */
  readonly ownStore: boolean;
}

export const DEFAULT_CHECKER_CONFIG: CheckerConfig = {
  l1MaxAgeMs: {},
  tagTrustMs: 5000,
  recoveryMs: 2000,
  clockSkewMs: 1,
  deliveryMs: 0,
  ownStore: false,
};

export type Exception =
  | 'l1-max-age-under-fault'
  | 'tag-versions-trusted-under-fault'
  | 'in-flight-to-reader'
  | 'outdated-build-on-own-store'
  | 'outdated-build-in-l1-under-fault';

/** A stale read and the invalidation it missed. */
export interface StaleRead {
  readonly read: Read;
  readonly missed: Invalidation;
  /** `version`: an older version of the row; `replaced`: a value made before the invalidation. */
  readonly why: 'version' | 'replaced';
  /** How long after the invalidation returned the read began (ms). */
  readonly stalenessMs: number;
  /** The faults under way while the invalidation ran. */
  readonly faults: readonly string[];
  /** Which allowed exception covers it, if one does. */
  readonly allowed?: Exception;
  /** A one-line kind, for grouping: e.g. `get after delete: a build's value, same process`. */
  readonly label: string;
}

export interface CheckResult {
  /** Reads that returned a value, all checked. */
  readonly readsChecked: number;
  readonly invalidations: number;
  /** Stale reads no exception covers. */
  readonly violations: readonly StaleRead[];
  /** Stale reads within an allowed exception. */
  readonly allowed: readonly StaleRead[];
  /** The longest `stalenessMs` among the violations (0 when none). */
  readonly worstStalenessMs: number;
}

const overlaps = (fault: Fault, from: number, to: number, recoveryMs: number): boolean =>
  fault.start <= to && fault.end + recoveryMs >= from;

/** Checks every read of `history` against the invalidations that returned before it began. */
export function checkHistory(history: History, given: Partial<CheckerConfig> = {}): CheckResult {
  const config = { ...DEFAULT_CHECKER_CONFIG, ...given };
  const byKey = new Map<string, Invalidation[]>();
  const writes = new Map<string, Invalidation>();
  let invalidations = 0;
  for (const op of history.operations) {
    if (op.kind !== 'invalidation') continue;
    if (op.wrote) writes.set(op.wrote.id, op);
    if (!op.ok) continue;
    invalidations++;
    for (const key of op.keys) {
      const list = byKey.get(key) ?? [];
      list.push(op);
      byKey.set(key, list);
    }
  }
  // When each build's value stopped being servable from a store of the user's: the last end of the
  // calls that began before its factory ran (the build's own, and those waiting on it).
  const buildEnds = new Map<string, number>();
  for (const op of history.operations) {
    if (op.kind !== 'read' || op.value?.origin !== 'build' || op.start > op.value.madeAt) continue;
    buildEnds.set(op.value.id, Math.max(buildEnds.get(op.value.id) ?? 0, op.end));
  }
  const violations: StaleRead[] = [];
  const allowed: StaleRead[] = [];
  let readsChecked = 0;
  for (const read of history.operations) {
    if (read.kind !== 'read' || read.value === null) continue;
    readsChecked++;
    const value = read.value;
    // The first invalidation that superseded the value: the longest staleness, one report a read.
    let found: StaleRead | undefined;
    for (const missed of byKey.get(read.key) ?? []) {
      if (!(missed.end + config.clockSkewMs < read.start)) continue;
      const why = supersedes(missed, value, writes, config.clockSkewMs);
      if (!why) continue;
      const stale = judged(read, missed, why, history.faults, config, buildEnds.get(value.id));
      if (!found || worse(stale, found)) found = stale;
    }
    if (found) (found.allowed ? allowed : violations).push(found);
  }
  return {
    readsChecked,
    invalidations,
    violations,
    allowed,
    worstStalenessMs: violations.reduce((worst, v) => Math.max(worst, v.stalenessMs), 0),
  };
}

// One invalidation no exception covers makes the read a violation; then the longest staleness.
const worse = (a: StaleRead, b: StaleRead): boolean =>
  (!a.allowed && b.allowed !== undefined) ||
  (!a.allowed === !b.allowed && a.stalenessMs > b.stalenessMs);

function supersedes(
  missed: Invalidation,
  value: RowValue,
  writes: ReadonlyMap<string, Invalidation>,
  skewMs: number,
): 'version' | 'replaced' | undefined {
  if (missed.wrote?.id === value.id) return undefined;
  // The source serializes its rows' versions: a value carrying the version `missed` bumped the row
  // to, or a later one, was read (a build) or bumped (a write) after that bump, so after `missed`
  // began, whatever two processes' clocks recorded.
  if (missed.row === value.row && missed.version !== undefined) {
    if (value.version >= missed.version) return undefined;
    if (value.origin === 'build') return 'version';
  }
  if (value.origin === 'build') {
    return value.madeAt + skewMs < missed.start ? 'replaced' : undefined;
  }
  // A written value: the write that stored it ended before this invalidation began. (Concurrent
  // writes may land in either order, whatever versions they carry.)
  const write = writes.get(value.id);
  return write && write.end + skewMs < missed.start ? 'replaced' : undefined;
}

function judged(
  read: Read,
  missed: Invalidation,
  why: 'version' | 'replaced',
  faults: readonly Fault[],
  config: CheckerConfig,
  buildEnd: number | undefined,
): StaleRead {
  const stalenessMs = read.start - missed.end;
  const under = faults
    .filter((f) => overlaps(f, missed.start, missed.end, config.recoveryMs))
    .map((f) => f.kind);
  const maxAge = config.l1MaxAgeMs[read.process];
  const trustMs = maxAge ?? config.tagTrustMs;
  // A process drops its own copy and learns its own tag bump as it makes them: only another
  // process's invalidation can be hidden from it.
  const other = read.process !== missed.process;
  let allowed: Exception | undefined;
  if (other && under.length > 0 && maxAge !== undefined && stalenessMs < maxAge) {
    allowed = 'l1-max-age-under-fault';
  } else if (other && under.length > 0 && missed.tags && stalenessMs < trustMs) {
    allowed = 'tag-versions-trusted-under-fault';
  } else if (other && stalenessMs < config.deliveryMs) {
    allowed = 'in-flight-to-reader';
  } else if (config.ownStore && buildEnd !== undefined) {
    if (read.start < buildEnd + config.clockSkewMs) allowed = 'outdated-build-on-own-store';
    else if (
      maxAge !== undefined &&
      read.start < buildEnd + maxAge &&
      faults.some((f) => overlaps(f, buildEnd, buildEnd, config.recoveryMs))
    ) {
      allowed = 'outdated-build-in-l1-under-fault';
    }
  }
  const origin = read.value!.origin === 'build' ? "a build's value" : 'a written value';
  const where = read.process === missed.process ? 'same process' : 'another process';
  const l1 = maxAge === undefined ? '' : ', l1';
  const fault = under.length > 0 ? `, under ${[...new Set(under)].join('+')}` : '';
  const label = `${read.call} after ${missed.call}: ${origin} (${why}), ${where}${l1}${fault}`;
  return { read, missed, why, stalenessMs, faults: under, label, ...(allowed ? { allowed } : {}) };
}

/** The stale reads by kind, most frequent first: `count × label (worst staleness)`. */
export function summarize(stale: readonly StaleRead[]): string[] {
  const kinds = new Map<string, { count: number; worst: number }>();
  for (const s of stale) {
    const kind = kinds.get(s.label) ?? { count: 0, worst: 0 };
    kind.count++;
    kind.worst = Math.max(kind.worst, s.stalenessMs);
    kinds.set(s.label, kind);
  }
  return [...kinds]
    .toSorted((a, b) => b[1].count - a[1].count)
    .map(([label, { count, worst }]) => `${count} × ${label} (worst ${worst.toFixed(1)} ms)`);
}
