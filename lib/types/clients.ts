// The shapes the release subscriber works with: its connection, the client it copies, what a
// listener gets back, and its options.

/**
 * The part of a pub/sub connection the subscriber uses: ioredis `Redis` (standalone) and `Cluster`
 * made with `shardedSubscribers: true` both fit.
 *
 * @example
 * ```ts
 * const connection: SubscriberConnection = new Redis().duplicate();
 * ```
 */
export interface SubscriberConnection {
  ssubscribe(...channels: string[]): Promise<unknown>;
  sunsubscribe(...channels: string[]): Promise<unknown>;
  on(event: 'smessage', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  on(event: 'ready', listener: () => void): unknown;
  disconnect(): void;
}

/**
 * A client the subscriber can copy: ioredis `Redis.duplicate(overrides)` or
 * `Cluster.duplicate(startupNodes, overrides)`, `isCluster` telling them apart; or a node-redis
 * client or cluster through its adapter (`nodeRedisClient`), whose `duplicate()` ignores them.
 *
 * @example
 * ```ts
 * const client: DuplicableClient = new Redis(process.env.REDIS_URL!);
 * ```
 */
export interface DuplicableClient {
  readonly isCluster?: boolean;
  duplicate(...args: unknown[]): unknown;
}

/**
 * What {@link ReleaseSubscriber.listen} hands back: `ready` resolves `true` once Redis confirmed the
 * subscription and `false` when it could not subscribe, or when the subscriber is unusable and
 * waits out its retry cool-down (never rejects); `close()` stops listening.
 *
 * @example
 * ```ts
 * const listening: Listening = subscriber.listen(channel, () => wake());
 * if (!(await listening.ready)) console.log('polling instead');
 * listening.close();
 * ```
 */
export interface Listening {
  readonly ready: Promise<boolean>;
  close(): void;
}

/**
 * Options of a {@link ReleaseSubscriber}.
 *
 * @example
 * ```ts
 * const options: ReleaseSubscriberOptions = { idleMs: 0, onError: (e) => logger.warn(e.message) };
 * ```
 */
export interface ReleaseSubscriberOptions {
  /** How long the connection stays open after the last listener left. Default `1000` ms. */
  idleMs?: number;
  /**
   * How long after a failure no SSUBSCRIBE is sent: listeners get `ready === false` at once and
   * poll. The first listener after it tries again. A connection that is ready again (Redis came
   * back) ends it early. Default `1000` ms.
   */
  retryMs?: number;
  /**
   * Told once about each failure (a refused SSUBSCRIBE, a connection error), whoever listens.
   * Listeners are told too, through the `onError` they passed to `listen`.
   */
  onError?: (error: Error) => void;
}

/**
 * What the lock needs from a Redis client: `eval(script, numkeys, ...args)`, as ioredis `Redis`
 * and `Cluster` have. `evalsha` is used when present, falling back to `eval` on NOSCRIPT.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * const client: RedisScriptClient = new Redis();
 * ```
 */
export interface RedisScriptClient {
  eval(script: string, numkeys: number, ...args: (string | number)[]): unknown;
  evalsha?(sha: string, numkeys: number, ...args: (string | number)[]): unknown;
  /**
   * Optional: `SET key value PX ms NX`, answering `'OK'` or `null` (ioredis has it). When present,
   * acquire sends it directly instead of running it inside a Lua script.
   */
  set?(key: string, value: string, px: 'PX', milliseconds: number, nx: 'NX'): unknown;
}
