/**
 * Messages between the multi-process tests (test/multi-process/single-flight.spec.ts, test/faults/)
 * and their worker processes (IPC).
 */

/** What the parent asks a worker to do. */
export type Command =
  | {
      readonly cmd: 'flight';
      readonly id: number;
      /** The cache key. */
      readonly key: string;
      /** How many concurrent @SingleFlight calls to make. */
      readonly callers: number;
      /** How long the method runs, in ms. */
      readonly buildMs: number;
    }
  | { readonly cmd: 'fence'; readonly id: number; readonly key: string }
  | {
      /** Concurrent calls of the fault-test method on one key, each answered with how it went. */
      readonly cmd: 'calls';
      readonly id: number;
      readonly key: string;
      readonly callers: number;
      /** How long the method waits (a timer), in ms. */
      readonly buildMs: number;
      /** How long the method then blocks the event loop (a busy loop), in ms. */
      readonly blockMs?: number;
      /** How long it waits again after the busy loop, in ms. */
      readonly afterMs?: number;
    }
  | {
      /**
       * Load: `loops` concurrent loops, loop i calling the fault-test method on `prefix` + i again
       * and again (`gapMs` apart) for `durationMs`.
       */
      readonly cmd: 'load';
      readonly id: number;
      readonly prefix: string;
      readonly loops: number;
      readonly durationMs: number;
      readonly gapMs: number;
    };

/** One run of the fault-test method, as it saw it. */
export interface Build {
  readonly key: string;
  readonly pid: number;
  readonly startedAt: number;
  readonly finishedAt: number;
  /** `SingleFlight.fence()`: a number when the run held the lock (fencing is on), else undefined. */
  readonly fence: number | undefined;
  /** Whether `SingleFlight.signal()` had aborted by the end of the run. */
  readonly aborted: boolean;
}

/** One call of the fault-test method: when it was made and answered, and with what. */
export interface Call {
  readonly calledAt: number;
  readonly resolvedAt: number;
  readonly value?: Build;
  readonly error?: string;
}

/** What a worker reports as it happens (only with REPORT=1 in its environment). */
export type WorkerEvent =
  | {
      readonly event: 'began';
      readonly key: string;
      readonly pid: number;
      readonly at: number;
      readonly fence: number | undefined;
    }
  | { readonly event: 'built'; readonly build: Build }
  | {
      readonly event: 'acquired';
      readonly pid: number;
      readonly key: string;
      readonly token: string;
      readonly fence: number | undefined;
      readonly at: number;
    }
  | {
      readonly event: 'lockLost';
      readonly pid: number;
      readonly cacheKey: string;
      readonly reason: string;
      readonly at: number;
    }
  | {
      readonly event: 'settled';
      readonly pid: number;
      readonly op: 'extend' | 'release';
      readonly key: string;
      readonly token: string;
      /** The call's result: whether it extended (or released), and the error code if any. */
      readonly done: boolean;
      readonly error: string | undefined;
      readonly at: number;
    };

/** What the method returned (the leader's, shared with everyone else). */
export interface Built {
  readonly pid: number;
  readonly startedAt: number;
  readonly finishedAt: number;
}

/** What a worker answers. */
export type Reply =
  | { readonly ready: true; readonly pid: number }
  | { readonly started: string; readonly pid: number }
  | {
      readonly id: number;
      /** Each caller's value and when its call resolved. */
      readonly results: readonly { readonly value: Built; readonly resolvedAt: number }[];
      /** Redis acquires this worker made for the flight. */
      readonly acquires: number;
      /** Method runs in this worker. */
      readonly runs: number;
    }
  | { readonly id: number; readonly fence: number | undefined }
  | { readonly id: number; readonly calls: readonly Call[] }
  | WorkerEvent
  | { readonly id: number; readonly error: string };
