import type { SingleFlightEngine } from '../../lib/index.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';

/** One run of the work: which instance ran it, for which call, when, and whether it held the lock. */
export interface Build {
  readonly instance: number;
  /** When the call that led this flight was made: `start - callStart` is its admission delay. */
  readonly callStart: number;
  readonly start: number;
  end: number | undefined;
  readonly locked: boolean;
}

/** One call of `engine.run`: when it was made, when it settled, and how. */
export interface Call {
  readonly instance: number;
  readonly start: number;
  end: number | undefined;
  /** `'value'`: it resolved with a build's value; anything else is a defect. */
  outcome: 'pending' | 'value' | 'undefined' | 'rejected';
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Many callers of one cache key on several independent engines (each its own lock and client, as
 * separate application instances have), with every call and every run of the work recorded, so
 * that a test can count builds and bound latencies around a fault. Calls use `share: true`: in a
 * healthy stampede one instance builds and the others take its result.
 *
 * @example
 * ```ts
 * const stampede = new FailoverStampede(engines, 'report', 300);
 * await stampede.wave(8); // 8 concurrent callers on every instance
 * const stop = stampede.tick(100); // one call per instance every 100 ms, until stop()
 * ```
 */
export class FailoverStampede {
  readonly builds: Build[] = [];
  readonly calls: Call[] = [];
  private readonly pending = new Set<Promise<void>>();
  /** Awaited inside every locked build, e.g. to look at the lock's key on the server. */
  onLockedBuild: ((build: Build) => Promise<void>) | undefined;

  constructor(
    private readonly engines: readonly SingleFlightEngine[],
    private readonly key: string,
    private readonly buildMs: number,
  ) {}

  /** One call on `instance`; resolves when it settled (never rejects). */
  call(instance: number): Promise<void> {
    const call: Call = { instance, start: Date.now(), end: undefined, outcome: 'pending' };
    this.calls.push(call);
    const work = async (): Promise<string> => {
      const build: Build = {
        instance,
        callStart: call.start,
        start: Date.now(),
        end: undefined,
        locked: currentFlight()?.locked === true,
      };
      this.builds.push(build);
      if (build.locked) await this.onLockedBuild?.(build);
      await sleep(this.buildMs);
      build.end = Date.now();
      return `${instance}@${build.start}`;
    };
    const settled = this.engines[instance]!.run(this.key, work, { share: true }).then(
      (value) => {
        call.outcome = typeof value === 'string' ? 'value' : 'undefined';
      },
      () => {
        call.outcome = 'rejected';
      },
    );
    const done = settled.finally(() => {
      call.end = Date.now();
      this.pending.delete(done);
    });
    this.pending.add(done);
    return done;
  }

  /** `callers` concurrent calls on every instance; resolves to the builds they made. */
  async wave(callers: number): Promise<Build[]> {
    const from = this.builds.length;
    const calls: Promise<void>[] = [];
    for (let i = 0; i < this.engines.length; i++) {
      for (let c = 0; c < callers; c++) calls.push(this.call(i));
    }
    await Promise.all(calls);
    return this.builds.slice(from);
  }

  /** One call on every instance every `everyMs`, until the returned function is called. */
  tick(everyMs: number): () => void {
    const timer = setInterval(() => {
      for (let i = 0; i < this.engines.length; i++) void this.call(i);
    }, everyMs);
    return () => clearInterval(timer);
  }

  /** Resolves once every call made so far has settled. */
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.all(this.pending);
  }
}

/** The largest value, or 0. */
export const worst = (values: readonly number[]): number =>
  values.reduce((a, b) => Math.max(a, b), 0);

/** The moments of one fail-over as a test saw them (`Date.now()` ms), and what it found. */
export interface FailoverMoments {
  readonly killedAt: number;
  readonly promotedAt: number;
  /** Start of the first locked build on the promoted server. */
  readonly firstLock: number;
  /** When every instance's breaker (and client) was back. */
  readonly backAt: number;
  /** PTTL of the killed master's last lock, as the promoted server had it. */
  readonly staleLockMs: number;
  /** Acquires the lock gave up on that reached the promoted server after their release. */
  readonly lateAcquires: number;
  /** The builds of one more stampede, after the fail-over. */
  readonly after: readonly Build[];
}

/** The figures a fail-over test prints and bounds: latencies, builds without the lock, and more. */
export function failoverFigures(stampede: FailoverStampede, moments: FailoverMoments) {
  const { killedAt, promotedAt, firstLock, backAt } = moments;
  const down = stampede.builds.filter((b) => b.callStart >= killedAt && b.start < promotedAt);
  const extra = stampede.builds.filter((b) => b.start >= firstLock && !b.locked);
  return {
    failoverMs: promotedAt - killedAt,
    killToFirstLockMs: firstLock - killedAt,
    killToEveryInstanceBackMs: backAt - killedAt,
    staleLockMs: moments.staleLockMs,
    worstAdmissionWhileDownMs: worst(down.map((b) => b.start - b.callStart)),
    worstCallWhileDownMs: worst(
      stampede.calls
        .filter((c) => c.start >= killedAt && c.start < promotedAt)
        .map((c) => c.end! - c.start),
    ),
    worstCallMs: worst(stampede.calls.map((c) => c.end! - c.start)),
    buildsWhileDown: down.length,
    lockedBuildsWhileDown: down.filter((b) => b.locked).length,
    unlockedBuildsAfterFirstLock: extra.length,
    unlockedBuildsAfterBack: extra.filter((b) => b.start > backAt).length,
    lateAcquires: moments.lateAcquires,
    buildsPerStampedeAfter: moments.after.length,
    calls: stampede.calls.length,
    unsettledCalls: stampede.calls.filter((c) => c.outcome !== 'value').length,
  };
}
