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
  disconnect(): void;
}

/**
 * A client the subscriber can copy: ioredis `Redis.duplicate(overrides)` or
 * `Cluster.duplicate(startupNodes, overrides)`; `isCluster` tells them apart.
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
 * subscription and `false` when it could not subscribe (never rejects); `close()` stops listening.
 *
 * @example
 * ```ts
 * const listening: Listening = subscriber.listen(channel, () => wake());
 * if (!(await listening.ready)) console.log('relying on the backstop');
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
  /** Told about connection and subscribe errors; waiters then rely on their backstop. */
  onError?: (error: Error) => void;
}

/** Default of {@link ReleaseSubscriberOptions.idleMs}. */
const DEFAULT_IDLE_MS = 1000;

interface Channel {
  readonly listeners: Set<() => void>;
  readonly subscribed: Promise<boolean>;
}

/**
 * One pub/sub connection per client, shared by every key that is waited on in this process. The
 * connection is a duplicate of the client, made when the first waiter listens and dropped when no
 * one has listened for `idleMs`. It SSUBSCRIBEs to a channel while at least one waiter listens to
 * it, and calls that channel's listeners on every message. A lost connection or message is never an
 * error for a waiter: each waiter keeps its own backstop timer.
 *
 * Use {@link releaseSubscriberFor} to get the one instance for a client.
 *
 * @example
 * ```ts
 * const subscriber = releaseSubscriberFor(client);
 * const listening = subscriber.listen(releaseChannel(lockKey), () => tryAgain());
 * await listening.ready;
 * // ... later
 * listening.close();
 * ```
 */
export class ReleaseSubscriber {
  private connection: SubscriberConnection | undefined;
  private readonly channels = new Map<string, Channel>();
  private idleTimer: NodeJS.Timeout | undefined;
  private readonly idleMs: number;
  private connectionsMade = 0;

  constructor(
    private readonly client: DuplicableClient,
    private readonly options: ReleaseSubscriberOptions = {},
  ) {
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
  }

  /** Whether the pub/sub connection is open now. */
  get connected(): boolean {
    return this.connection !== undefined;
  }

  /** How many pub/sub connections this subscriber has opened so far (over its whole life). */
  get connectionCount(): number {
    return this.connectionsMade;
  }

  /** The channels listened to now. */
  get channelNames(): readonly string[] {
    return [...this.channels.keys()];
  }

  /** Calls `onMessage` on every message on `channel` until `close()`. */
  listen(channel: string, onMessage: () => void): Listening {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    let entry = this.channels.get(channel);
    if (!entry) {
      entry = { listeners: new Set(), subscribed: this.subscribe(channel) };
      this.channels.set(channel, entry);
    }
    const listener = (): void => onMessage();
    entry.listeners.add(listener);
    const ready = entry.subscribed;
    let closed = false;
    return {
      ready,
      close: () => {
        if (closed) return;
        closed = true;
        this.leave(channel, listener);
      },
    };
  }

  /** Closes the connection now, whoever listens (e.g. on application shutdown). */
  close(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    this.channels.clear();
    this.connection?.disconnect();
    this.connection = undefined;
  }

  private async subscribe(channel: string): Promise<boolean> {
    try {
      await this.connect().ssubscribe(channel);
      return true;
    } catch (error) {
      this.report(error);
      return false;
    }
  }

  private leave(channel: string, listener: () => void): void {
    const entry = this.channels.get(channel);
    if (!entry?.listeners.delete(listener) || entry.listeners.size > 0) return;
    this.channels.delete(channel);
    const connection = this.connection;
    if (connection) {
      // Wait for SSUBSCRIBE's answer first, so SUNSUBSCRIBE cannot overtake it.
      void entry.subscribed.then((ok) =>
        ok && this.connection === connection && !this.channels.has(channel)
          ? connection.sunsubscribe(channel).catch((error: unknown) => this.report(error))
          : undefined,
      );
    }
    if (this.channels.size === 0) {
      this.idleTimer = setTimeout(() => {
        if (this.channels.size === 0) this.close();
      }, this.idleMs);
      this.idleTimer.unref();
    }
  }

  private connect(): SubscriberConnection {
    if (this.connection) return this.connection;
    // A Cluster needs sharded subscribers for SSUBSCRIBE: one connection to the shard of each slot.
    // Subscribe commands are sent as they are, never through an auto-pipeline.
    const overrides = { enableOfflineQueue: true, enableAutoPipelining: false };
    const connection = (
      this.client.isCluster === true
        ? this.client.duplicate(undefined, { shardedSubscribers: true, ...overrides })
        : this.client.duplicate(overrides)
    ) as SubscriberConnection;
    connection.on('error', (error) => this.report(error));
    connection.on('smessage', (channel) => {
      for (const listener of this.channels.get(channel)?.listeners ?? []) listener();
    });
    this.connection = connection;
    this.connectionsMade++;
    return connection;
  }

  private report(error: unknown): void {
    this.options.onError?.(error instanceof Error ? error : new Error(String(error)));
  }
}

const subscribers = new WeakMap<object, ReleaseSubscriber>();

/**
 * The one {@link ReleaseSubscriber} of `client` in this process, made on first call. Two Nest apps
 * with two clients get two; everything using one client shares one connection.
 *
 * @example
 * ```ts
 * const subscriber = releaseSubscriberFor(redis);
 * ```
 */
export function releaseSubscriberFor(
  client: DuplicableClient,
  options?: ReleaseSubscriberOptions,
): ReleaseSubscriber {
  let subscriber = subscribers.get(client);
  if (!subscriber) {
    subscriber = new ReleaseSubscriber(client, options);
    subscribers.set(client, subscriber);
  }
  return subscriber;
}
