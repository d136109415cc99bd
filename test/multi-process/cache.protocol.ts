/** Messages between test/multi-process/cache-stampede.spec.ts and its worker processes (IPC). */

/** What one factory run returned: who built it and when (epoch ms). */
export interface Built {
  readonly pid: number;
  readonly startedAt: number;
  readonly finishedAt: number;
  /** The length of the padding the value was built with (the padding stays in the worker). */
  readonly padBytes?: number;
}

/** What the parent asks a worker to do. */
export type CacheCommand =
  | {
      readonly cmd: 'get';
      readonly id: number;
      /** The cache key. */
      readonly key: string;
      /** How many concurrent getOrSet calls to make. */
      readonly callers: number;
      /** How long the factory runs, in ms. */
      readonly buildMs: number;
      /** Seconds fresh and seconds of grace, passed to getOrSet. */
      readonly ttl: number;
      readonly grace: number;
      /** Pads the built value with this many bytes. */
      readonly padBytes?: number;
    }
  /**
   * Reads `key` every `everyMs` for `forMs` with `earlyRefresh: beta` (0: off) and `grace: 0`, and
   * counts the reads that found no fresh entry (a `miss`).
   */
  | {
      readonly cmd: 'hot';
      readonly id: number;
      readonly key: string;
      readonly buildMs: number;
      readonly ttl: number;
      readonly beta: number;
      readonly forMs: number;
      readonly everyMs: number;
    }
  /** Waits until every cross-process build or refresh this worker started has ended. */
  | { readonly cmd: 'settle'; readonly id: number }
  /** `BufferCache.get(key)`: answers `{ value }` (`null` for none). */
  | { readonly cmd: 'read'; readonly id: number; readonly key: string }
  /** `BufferCache.set(key, value)`, or `delete(key)` when `value` is `null`: answers `{ done }`. */
  | { readonly cmd: 'write'; readonly id: number; readonly key: string; readonly value: unknown }
  /** `getOrSet(key, factory, { tags })`, the factory giving `pid:n`: answers `{ value }`. */
  | { readonly cmd: 'tagged'; readonly id: number; readonly key: string; readonly tags: string[] }
  /** `deleteByTag(tags)`: answers `{ done }`. */
  | { readonly cmd: 'untag'; readonly id: number; readonly tags: string[] };

/** One factory run in a worker (epoch ms). */
export interface FactoryRun {
  readonly key: string;
  readonly pid: number;
  readonly startedAt: number;
  readonly finishedAt: number | undefined;
}

/** What a worker answers. */
export type CacheReply =
  | { readonly ready: true; readonly pid: number }
  | { readonly started: string; readonly pid: number }
  | {
      readonly id: number;
      /** Each caller's value and when its call resolved (epoch ms). */
      readonly results: readonly { readonly value: Built; readonly answeredAt: number }[];
    }
  | {
      readonly id: number;
      /** Every factory run of this worker so far. */
      readonly runs: readonly FactoryRun[];
      /** When each `built` event of this worker came, by key (epoch ms). */
      readonly built: readonly { readonly key: string; readonly at: number }[];
      /** Cross-process builds (lock attempts) this worker started so far. */
      readonly attempts: number;
    }
  | { readonly id: number; readonly reads: number; readonly misses: number }
  | { readonly id: number; readonly value: unknown }
  | { readonly id: number; readonly done: true }
  | { readonly id: number; readonly error: string };
