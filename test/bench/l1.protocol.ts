// Messages between l1.bench.ts and its worker processes (l1.worker.ts): one writes, the others
// read one key and say when they saw what.

/** The version a read reports when the key had no entry. */
export const MISS = -1;

/** Parent → worker. */
export type ToL1Worker =
  /**
   * Two new caches on the worker's client under `prefix` (their own entries and invalidation
   * channel): one with `l1` (`maxAge` seconds), and one without, which announces nothing.
   */
  | { readonly type: 'open'; readonly prefix: string; readonly maxAge: number }
  /** Reads `key` until a read sends nothing to Redis: the worker's `l1` holds a copy. */
  | { readonly type: 'hold'; readonly key: string }
  /** Reads `key` in a loop until it answers `want` (a version, or `MISS`), then says when. */
  | { readonly type: 'watch'; readonly key: string; readonly want: number }
  /**
   * `set` (a version) or `delete` (`null`), through the cache with `l1` when `announce`; a set
   * with `tag` gives the entry that tag.
   */
  | {
      readonly type: 'write';
      readonly key: string;
      readonly version: number | null;
      readonly announce: boolean;
      readonly tag?: string;
    }
  /** `deleteByTag(tag)` through the cache with `l1`; answered with `wrote`. */
  | { readonly type: 'deleteByTag'; readonly tag: string }
  /** Reads `key` in a loop for `ms` and sends back every read. */
  | { readonly type: 'stream'; readonly key: string; readonly ms: number }
  | { readonly type: 'exit' };

/** Every read of a stream, in order, as parallel arrays (one IPC message). */
export interface Reads {
  /** Epoch ms at the start and at the end of each read. */
  readonly starts: readonly number[];
  readonly ends: readonly number[];
  /** The version read, or `MISS`. */
  readonly versions: readonly number[];
  /** Whether the read sent nothing to Redis: served from `l1`. */
  readonly local: readonly boolean[];
  /** Epoch ms at the end of the last read before the stream that was not served from `l1`. */
  readonly storeReadBefore: number;
}

/** Worker → parent. */
export type FromL1Worker =
  | { readonly type: 'ready' }
  | { readonly type: 'opened' }
  /** `ok: false` when no read was served from `l1` within the hold's time limit. */
  | { readonly type: 'held'; readonly ok: boolean; readonly version: number }
  | { readonly type: 'watching' }
  /** Epoch ms at the end of the first read that answered the version watched for; NaN: never. */
  | { readonly type: 'seen'; readonly at: number }
  /** Epoch ms when the write (or `deleteByTag`) was called and when its call returned. */
  | { readonly type: 'wrote'; readonly startedAt: number; readonly returnedAt: number }
  | { readonly type: 'streaming' }
  | { readonly type: 'streamed'; readonly reads: Reads };
