// Messages between cache.bench.ts and its worker processes (cache.worker.ts), and the routes of
// its HTTP app (cache.server.ts).

/** How a round finds its key: missing, past its ttl (within grace), or fresh. */
export type CacheMode = 'cold' | 'stale' | 'hit';

/** Parent → worker. */
export type ToCacheWorker =
  /** One call that builds and stores the key's entry (before a stale or hit round). */
  | {
      readonly type: 'prime';
      readonly strategy: string;
      readonly key: string;
      readonly mode: CacheMode;
    }
  | {
      readonly type: 'go';
      readonly strategy: string;
      readonly key: string;
      readonly mode: CacheMode;
      /** The round runs under MONITOR, which slows Redis: it is left out of the wake trace. */
      readonly monitored?: boolean;
    }
  /** Reads the primed key (`get()`) until a read sends nothing: the worker's `l1` holds a copy. */
  | { readonly type: 'hold'; readonly strategy: string; readonly key: string }
  /** The wake-up floor: sleep `idleMs`, then SPUBLISH on `WAKE_CHANNEL`. */
  | { readonly type: 'wake'; readonly idleMs: number }
  | { readonly type: 'exit' };

/** Worker → parent. */
export type FromCacheWorker =
  | { readonly type: 'ready'; readonly unavailable: Readonly<Record<string, string>> }
  | { readonly type: 'primed' }
  /** `ok: false` when no read was served from `l1` within the hold's time limit. */
  | { readonly type: 'held'; readonly ok: boolean }
  | { readonly type: 'done'; readonly result: CacheRound }
  /** Epoch ms right before the SPUBLISH of a `wake`. */
  | { readonly type: 'woke'; readonly sentAt: number }
  /** Epoch ms at which another worker's `wake` reached this one. */
  | { readonly type: 'heard'; readonly at: number };

/** The shard channel every worker listens on with a plain ioredis subscriber of its own. */
export const WAKE_CHANNEL = 'bench:wake-floor';

export interface CacheRound {
  /** Factory runs in this worker during the round, background refreshes included. */
  readonly builds: number;
  /** Epoch ms at the end of each factory run. */
  readonly buildEnds: readonly number[];
  /** Per caller, ms from `go` to its answer. */
  readonly latencies: readonly number[];
  /** Epoch ms of the last caller's answer in this worker. */
  readonly lastServed: number;
  /** Callers whose value was built in this round: they waited for a build. */
  readonly waited: number;
  /** The callers' cache reads (each a round trip) and the commandstats entries of one. */
  readonly reads: number;
  readonly commandsPerRead: number;
  readonly errors: number;
  readonly firstError?: string;
}

/** `maxAge` (seconds) of the modules with `l1`: the workers' second one, the server's second app. */
export const L1_MAX_AGE = 5;

/**
 * BufferCache from a module with `l1`: in the hit and stale rounds only, each worker holding a
 * copy of the entry when the round starts (a cold key has no copy to hold).
 */
export const L1_STRATEGY = 'BufferCache.getOrSet, module l1 (maxAge 5 s)';

/** Strategies of the stampede rounds, in table order; the parent and the workers share them. */
export const CACHE_STRATEGIES = [
  'BufferCache.getOrSet',
  L1_STRATEGY,
  'CacheInterceptor-style (get → build → set)',
  'cache-manager wrap()',
  'bentocache getOrSet',
] as const;

/** The routes of the hit-path app, in table order: `/<route>/<id>`. */
export const HIT_ROUTES = [
  { route: 'aside', label: 'cache-aside by hand (ioredis GET)' },
  { route: 'buffer-cache', label: 'BufferCache.getOrSet(key, f, { ttl })' },
  { route: 'buffer-cache-defaults', label: 'BufferCache.getOrSet(key, f), cacheDefaults' },
  { route: 'single-flight', label: '@SingleFlight around the handler' },
  { route: 'interceptor', label: 'CacheInterceptor (Keyv Redis store)' },
  { route: 'buffer-interceptor', label: 'BufferCacheInterceptor (URL key)' },
  { route: 'cached-l1', label: '@Cached, module l1: { maxAge: 5 }' },
  { route: 'constant', label: 'no cache: a constant answer (what Nest and HTTP cost)' },
] as const;

/** The route asked for at one URL (`/buffer-interceptor/1`): its entry is keyed by the URL. */
export const ONE_URL_ROUTE = 'buffer-interceptor';

/** The route served by the server's second app, whose module has `l1`. */
export const L1_ROUTE = 'cached-l1';

/** What the hit-path server sends once it is up: its app's port, and the `l1` app's. */
export type CacheServerMessage = {
  readonly type: 'listening';
  readonly port: number;
  readonly l1Port: number;
};
