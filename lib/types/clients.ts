// The client shapes the redis, memory and single-flight layers share.

/** A pub/sub connection: ioredis `Redis`, or `Cluster` made with `shardedSubscribers: true`. */
export interface SubscriberConnection {
  ssubscribe(...channels: string[]): Promise<unknown>;
  sunsubscribe(...channels: string[]): Promise<unknown>;
  on(event: 'smessage', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  on(event: 'ready', listener: () => void): unknown;
  /** Lets the process exit while the connection is open (node-redis's `unref()`). */
  unref?(): void;
  /** Asked now and then while subscribed: no answer means a silent connection. */
  ping?(): unknown;
  disconnect(): void;
}

/** ioredis `Redis.duplicate(overrides)` or `Cluster.duplicate(nodes, overrides)`, or node-redis. */
export interface DuplicableClient {
  readonly isCluster?: boolean;
  duplicate(...args: unknown[]): unknown;
}

/** `ready`: `true` once subscribed, `false` when not (then callers poll); it never rejects. */
export interface Listening {
  readonly ready: Promise<boolean>;
  close(): void;
}

export interface ReleaseSubscriberOptions {
  /** Ms a channel stays subscribed after its last listener left. Default `1000`. */
  idleMs?: number;
  /** Ms the connection stays open once no channel is subscribed. Default `30000`. */
  keepMs?: number;
  /** Ms after a failure with no SSUBSCRIBE (listeners poll), unless ready again. Default `1000`. */
  retryMs?: number;
  /** Told once about each failure, whoever listens. */
  onError?: (error: Error) => void;
}

/**
 * What the lock needs from a Redis client: `eval`, as ioredis `Redis` and `Cluster` have;
 * `evalsha` when present (falling back to `eval` on NOSCRIPT), and `SET … PX … NX` when present.
 *
 * @example
 * ```ts
 * const client: RedisScriptClient = new Redis();
 * ```
 */
export interface RedisScriptClient {
  eval(script: string, numkeys: number, ...args: (string | number)[]): unknown;
  evalsha?(sha: string, numkeys: number, ...args: (string | number)[]): unknown;
  set?(key: string, value: string, px: 'PX', milliseconds: number, nx: 'NX'): unknown;
}

/**
 * A connection of its own for the writes whose replication a caller waits for: Redis `WAIT` holds
 * the connection it is sent on, so it never holds the lock's.
 */
export interface WriterConnection {
  readonly client: RedisScriptClient;
  /** How many replicas have every write this connection made to `key`'s master (`WAIT`). */
  replicas(key: string, wanted: number, timeoutMs: number): Promise<unknown>;
  close(): void;
}
