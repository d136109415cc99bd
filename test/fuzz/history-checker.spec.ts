import { describe, expect, it } from 'vitest';
import {
  checkHistory,
  summarize,
  type Fault,
  type Invalidation,
  type Operation,
  type Read,
  type RowValue,
} from './history-checker.js';

/** The history checker on small hand-written histories: what it reports and what it lets pass. */

const built = (version: number, madeAt: number, id = `b${version}@${madeAt}`): RowValue => ({
  row: 'r',
  version,
  id,
  origin: 'build',
  madeAt,
});

const read = (start: number, end: number, value: RowValue | null, process = 1): Read => ({
  kind: 'read',
  call: 'get',
  key: 'k',
  process,
  start,
  end,
  value,
});

const invalidation = (
  call: string,
  start: number,
  end: number,
  extra: Partial<Invalidation> = {},
): Invalidation => ({
  kind: 'invalidation',
  call,
  keys: ['k'],
  tags: false,
  process: 0,
  start,
  end,
  ok: true,
  ...extra,
});

const check = (operations: Operation[], faults: Fault[] = [], l1?: number) =>
  checkHistory({ operations, faults }, { l1MaxAgeMs: { 1: l1 } });

describe('the history checker', () => {
  it('reports a read that began after a delete returned and served a value built before it', () => {
    const result = check([invalidation('delete', 10, 20), read(30, 31, built(1, 5))]);
    expect(result.violations).toHaveLength(1);
    expect(result.violations[0]).toMatchObject({ why: 'replaced', stalenessMs: 10 });
    expect(result.violations[0]!.label).toBe(
      "get after delete: a build's value (replaced), another process",
    );
    expect(result.worstStalenessMs).toBe(10);
  });

  it('lets a read pass that began before the delete returned (concurrent with it)', () => {
    const result = check([invalidation('delete', 10, 20), read(19, 40, built(1, 5))]);
    expect(result.violations).toEqual([]);
    expect(result.readsChecked).toBe(1);
  });

  it("on a store of its own, lets a build's value pass until the calls waiting on that build returned", () => {
    const value = built(1, 5);
    const operations: Operation[] = [
      read(4, 50, value, 2), // the build's own call: it deletes what it wrote before it returns
      invalidation('delete', 10, 20),
      read(30, 31, value),
      read(60, 61, value),
    ];
    const own = checkHistory({ operations, faults: [] }, { ownStore: true });
    expect(own.allowed.map((s) => [s.read.start, s.allowed])).toEqual([
      [30, 'outdated-build-on-own-store'],
    ]);
    expect(own.violations.map((s) => s.read.start)).toEqual([60]);
    // On the built-in store the build's release checks and writes in one step: no window.
    const builtIn = checkHistory({ operations, faults: [] });
    expect(builtIn.violations.map((s) => s.read.start)).toEqual([30, 60]);
  });

  it("on a store of its own with l1, lets a copy of a build's value pass within maxAge of the build's end only under a fault", () => {
    const value = built(1, 5);
    const operations: Operation[] = [
      read(4, 50, value, 2), // the build's own call, in another process
      invalidation('delete', 10, 20, { process: 1 }), // by the reading process itself
      read(500, 501, value),
      read(1500, 1501, value),
    ];
    const config = { ownStore: true, l1MaxAgeMs: { 1: 1000 } };
    const faulted = checkHistory(
      { operations, faults: [{ kind: 'pubsub-kill', start: 45, end: 46 }] },
      config,
    );
    expect(faulted.allowed.map((s) => [s.read.start, s.allowed])).toEqual([
      [500, 'outdated-build-in-l1-under-fault'],
    ]);
    expect(faulted.violations.map((s) => s.read.start)).toEqual([1500]);
    // Without a fault the deletion is heard: no copy outlives the build.
    const calm = checkHistory({ operations, faults: [] }, config);
    expect(calm.violations.map((s) => s.read.start)).toEqual([500, 1500]);
    // Without l1 there is no copy to keep.
    const noL1 = checkHistory(
      { operations, faults: [{ kind: 'pubsub-kill', start: 45, end: 46 }] },
      { ownStore: true },
    );
    expect(noL1.violations.map((s) => s.read.start)).toEqual([500, 1500]);
  });

  it('reports a build that read an older version of the row than a returned write bumped it to', () => {
    // The factory began after the write did, but read the source before its bump.
    const write = invalidation('deleteByTag', 10, 20, { row: 'r', version: 2, tags: true });
    const result = check([write, read(30, 31, built(1, 12))]);
    expect(result.violations.map((v) => v.why)).toEqual(['version']);
  });

  it('lets a build pass that began after the invalidation began and read its version', () => {
    const write = invalidation('delete', 10, 20, { row: 'r', version: 2 });
    expect(check([write, read(30, 31, built(2, 12))]).violations).toEqual([]);
  });

  it('trusts the source over the clocks: a value carrying the version a write bumped the row to, or a later one, was made after it', () => {
    // Two processes' clocks put the build's start, and the other write's end, before the delete.
    const deleted = invalidation('delete', 10, 20, { row: 'r', version: 2 });
    expect(check([deleted, read(30, 31, built(2, 5))]).violations).toEqual([]);
    const later = { ...built(3, 0, 'w3'), origin: 'write' as const };
    const set = invalidation('set', 2, 8, { wrote: later, row: 'r', version: 3, process: 2 });
    expect(check([set, deleted, read(30, 31, later)]).violations).toEqual([]);
    // Without a version to go by, the clocks decide.
    const untold = invalidation('deleteByTag', 10, 20, { tags: true });
    expect(check([untold, read(30, 31, built(2, 5))]).violations.map((v) => v.why)).toEqual([
      'replaced',
    ]);
  });

  it('reports a set value served after a later set returned, and lets the later one pass', () => {
    const first = { ...built(1, 0, 'w1'), origin: 'write' as const };
    const second = { ...built(2, 0, 'w2'), origin: 'write' as const };
    const operations = [
      invalidation('set', 0, 5, { wrote: first, row: 'r', version: 1 }),
      invalidation('set', 10, 20, { wrote: second, row: 'r', version: 2 }),
      read(30, 31, first),
      read(30, 31, second),
    ];
    const result = check(operations);
    expect(result.violations.map((v) => [v.read.value!.id, v.missed.call, v.why])).toEqual([
      ['w1', 'set', 'replaced'],
    ]);
  });

  it('lets either of two overlapping sets win, whatever versions they carry', () => {
    const first = { ...built(1, 0, 'w1'), origin: 'write' as const };
    const second = { ...built(2, 0, 'w2'), origin: 'write' as const };
    const operations = [
      invalidation('set', 0, 15, { wrote: first, row: 'r', version: 1 }),
      invalidation('set', 10, 20, { wrote: second, row: 'r', version: 2 }),
      read(30, 31, first),
    ];
    expect(check(operations).violations).toEqual([]);
  });

  it('ignores an invalidation that rejected, and a read that found nothing', () => {
    const failed = invalidation('delete', 10, 20, { ok: false, row: 'r', version: 2 });
    const result = check([failed, read(30, 31, built(1, 5)), read(30, 31, null)]);
    expect(result.violations).toEqual([]);
    expect(result.readsChecked).toBe(1);
    expect(result.invalidations).toBe(0);
  });

  it('ignores an invalidation of another key', () => {
    expect(
      check([invalidation('delete', 10, 20, { keys: ['other'] }), read(30, 31, built(1, 5))]),
    ).toMatchObject({ violations: [] });
  });

  it('allows an l1 copy within maxAge of an invalidation made under a fault, and not past it', () => {
    const faults = [{ kind: 'pubsub-kill', start: 15, end: 16 }];
    const operations = [
      invalidation('delete', 10, 20),
      read(500, 501, built(1, 5)),
      read(1500, 1501, built(1, 5)),
    ];
    const result = check(operations, faults, 1000);
    expect(result.allowed.map((s) => [s.read.start, s.allowed])).toEqual([
      [500, 'l1-max-age-under-fault'],
    ]);
    expect(result.violations.map((s) => s.read.start)).toEqual([1500]);
    expect(result.violations[0]!.label).toContain('under pubsub-kill');
  });

  it('allows no l1 copy under a fault in the process that made the invalidation itself', () => {
    const faults = [{ kind: 'pubsub-kill', start: 15, end: 16 }];
    const result = check(
      [invalidation('delete', 10, 20, { process: 1 }), read(500, 501, built(1, 5))],
      faults,
      1000,
    );
    expect(result.allowed).toEqual([]);
    expect(result.violations[0]!.label).toBe(
      "get after delete: a build's value (replaced), same process, l1, under pubsub-kill",
    );
  });

  it('allows a read in another process within deliveryMs only when asked to, with l1 or not', () => {
    const operations = [invalidation('delete', 10, 20), read(25, 26, built(1, 5))];
    const strict = check(operations, [], 1000);
    expect(strict.violations).toHaveLength(1);
    for (const l1MaxAgeMs of [{ 1: 1000 }, {}]) {
      const lenient = checkHistory({ operations, faults: [] }, { l1MaxAgeMs, deliveryMs: 10 });
      expect(lenient.allowed.map((s) => s.allowed)).toEqual(['in-flight-to-reader']);
      expect(lenient.violations).toEqual([]);
      const later = [invalidation('delete', 10, 20), read(31, 32, built(1, 5))];
      expect(
        checkHistory({ operations: later, faults: [] }, { l1MaxAgeMs, deliveryMs: 10 }).violations,
      ).toHaveLength(1);
    }
  });

  it('allows nothing within deliveryMs in the process that invalidated', () => {
    const operations = [invalidation('delete', 10, 20), read(25, 26, built(1, 5), 0)];
    const result = checkHistory({ operations, faults: [] }, { deliveryMs: 10 });
    expect(result.violations).toHaveLength(1);
  });

  it('allows no l1 copy after an invalidation that no fault overlapped', () => {
    const faults = [{ kind: 'pause', start: 10_000, end: 10_500 }];
    const result = check([invalidation('delete', 10, 20), read(30, 31, built(1, 5))], faults, 1000);
    expect(result.allowed).toEqual([]);
    expect(result.violations).toHaveLength(1);
  });

  it('allows a trusted tag version for 5 s without l1 when a fault overlapped the tag bump', () => {
    const faults = [{ kind: 'restart', start: 0, end: 12 }];
    const bump = invalidation('deleteByTag', 10, 20, { tags: true });
    const result = check(
      [bump, read(4000, 4001, built(1, 5)), read(6000, 6001, built(1, 5))],
      faults,
    );
    expect(result.allowed.map((s) => s.allowed)).toEqual(['tag-versions-trusted-under-fault']);
    expect(result.violations.map((s) => s.read.start)).toEqual([6000]);
  });

  it('reports one stale read once, against the invalidation no exception covers', () => {
    const faults = [{ kind: 'pause', start: 100, end: 110 }];
    const operations = [
      invalidation('delete', 10, 20),
      invalidation('delete', 100, 105),
      read(300, 301, built(1, 5)),
    ];
    const result = check(operations, faults, 1000);
    expect(result.violations).toHaveLength(1);
    expect(result.violations[0]!.missed.start).toBe(10);
    expect(result.allowed).toEqual([]);
  });

  it('sums the stale reads up by kind', () => {
    const result = check([
      invalidation('delete', 10, 20),
      read(30, 31, built(1, 5)),
      read(60, 61, built(1, 5)),
    ]);
    expect(summarize(result.violations)).toEqual([
      "2 × get after delete: a build's value (replaced), another process (worst 40.0 ms)",
    ]);
  });
});
