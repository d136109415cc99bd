// Messages between stampede.bench.ts and its worker processes (stampede.worker.ts).

/** Parent → worker. */
export type ToWorker =
  | { readonly type: 'go'; readonly strategy: string; readonly key: string }
  | { readonly type: 'exit' };

/** Worker → parent. */
export type FromWorker =
  | { readonly type: 'ready'; readonly unavailable: Readonly<Record<string, string>> }
  | { readonly type: 'done'; readonly result: WorkerRound };

export interface WorkerRound {
  readonly builds: number;
  /** Epoch ms when each build's value was in the cache (or returned, when nothing caches). */
  readonly buildEnds: readonly number[];
  /** Per caller, ms from `go` to its answer. */
  readonly latencies: readonly number[];
  /** Epoch ms of the last caller's answer in this worker. */
  readonly lastServed: number;
  readonly errors: number;
  readonly firstError?: string;
}

/** Strategy names, in table order; the parent and the workers share them. */
export const STAMPEDE_STRATEGIES = [
  'no lock',
  '@SingleFlight wait',
  '@SingleFlight share',
  '@sesamecare-oss/redlock (defaults)',
  'redis-semaphore Mutex (defaults)',
  'murlock @MurLock',
  '@anchan828/nest-redlock @Redlock',
] as const;
