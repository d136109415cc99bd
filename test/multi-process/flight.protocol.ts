/** Messages between test/multi-process/single-flight.spec.ts and its worker processes (IPC). */

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
  | { readonly cmd: 'fence'; readonly id: number; readonly key: string };

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
  | { readonly id: number; readonly error: string };
