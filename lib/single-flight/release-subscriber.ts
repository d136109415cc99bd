import type {
  DuplicableClient,
  Listening,
  ReleaseSubscriberOptions,
  SubscriberConnection,
} from '../types/clients.js';

export type {
  DuplicableClient,
  Listening,
  ReleaseSubscriberOptions,
  SubscriberConnection,
} from '../types/clients.js';
import { asError } from '../messages/error-text.js';

/** Default of {@link ReleaseSubscriberOptions.idleMs}. */
const DEFAULT_IDLE_MS = 1000;

/** Default of {@link ReleaseSubscriberOptions.retryMs}. */
const DEFAULT_RETRY_MS = 1000;

const NOT_SUBSCRIBED: Promise<boolean> = Promise.resolve(false);

interface Listener {
  readonly onMessage: () => void;
  readonly onError: ((error: Error) => void) | undefined;
}

interface Channel {
  readonly listeners: Set<Listener>;
  /** The answer to the last SSUBSCRIBE sent for the channel. */
  subscribed: Promise<boolean>;
  /** That answer once it came: `undefined` while it is pending. */
  ok: boolean | undefined;
}

/**
 * One pub/sub connection per client, shared by every key that is waited on in this process. The
 * connection is a duplicate of the client, made when the first waiter listens and dropped when no
 * one has listened for `idleMs`. It SSUBSCRIBEs to a channel while at least one waiter listens to
 * it, and calls that channel's listeners on every message. A lost connection or message is never an
 * error for a waiter: each waiter keeps its own backstop timer.
 *
 * A refused SSUBSCRIBE (Redis 6 has none, an ACL user without `ssubscribe`) or a connection error
 * or close makes the subscriber unusable ({@link usable}): every listener is called, as if its lock
 * were released, so that its waiter tries again and polls instead of waiting for a message that may
 * never come. The failure is reported once, to `options.onError` and to the listeners' `onError`.
 * For `retryMs` after it, `listen` sends nothing and its `ready` is `false`; the first `listen` after
 * that subscribes again, and a confirmed subscription makes the subscriber usable again.
 *
 * When the lost connection is ready again (Redis restarted, or came back after a network cut), the
 * cool-down is over at once: every channel that still has listeners is SSUBSCRIBEd again on it, so
 * that a listener that kept listening through the failure hears the next release, and the first
 * confirmation makes the subscriber usable again.
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
  private readonly retryMs: number;
  /** When the subscriber last became unusable; `undefined` while it is usable. */
  private failedAt: number | undefined;
  /** Before this time (ms) no SSUBSCRIBE is sent: the cool-down after a failure. */
  private retryAt = 0;
  /** Failures reported so far: an attempt begun before the last one is part of that failure. */
  private failures = 0;

  constructor(
    private readonly client: DuplicableClient,
    private readonly options: ReleaseSubscriberOptions = {},
  ) {
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
    this.retryMs = options.retryMs ?? DEFAULT_RETRY_MS;
  }

  /**
   * Whether a release would reach the listeners now: `false` from a refused SSUBSCRIBE or a
   * connection error or close until the next confirmed subscription.
   */
  get usable(): boolean {
    return this.failedAt === undefined;
  }

  /**
   * Calls `onMessage` on every message on `channel`, and when the subscriber becomes unusable (a
   * release may be missed then), until `close()`. `onError` is told of each failure meanwhile.
   */
  listen(channel: string, onMessage: () => void, onError?: (error: Error) => void): Listening {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    let entry = this.channels.get(channel);
    if (!entry) {
      entry = { listeners: new Set(), subscribed: NOT_SUBSCRIBED, ok: false };
      this.channels.set(channel, entry);
    }
    // Added first, so that it hears of a failure of the SSUBSCRIBE sent for it.
    const listener: Listener = { onMessage, onError };
    entry.listeners.add(listener);
    if (entry.ok === false) {
      // Within the cool-down a new SSUBSCRIBE would fail like the last one: poll instead.
      entry.subscribed = this.mayTry() ? this.subscribe(channel, entry) : NOT_SUBSCRIBED;
    }
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
    const connection = this.connection;
    // Forgotten first: its own close event is no failure.
    this.connection = undefined;
    connection?.disconnect();
  }

  private mayTry(): boolean {
    return this.failedAt === undefined || Date.now() >= this.retryAt;
  }

  private async subscribe(channel: string, entry: Channel): Promise<boolean> {
    const attempt = this.failures;
    entry.ok = undefined;
    let ok: boolean;
    try {
      await this.connect().ssubscribe(channel);
      ok = true;
    } catch (error) {
      ok = false;
      // Concurrent SSUBSCRIBEs fail alike: only the first of them is reported.
      this.fail(attempt === this.failures ? error : undefined);
    }
    if (ok) this.failedAt = undefined;
    entry.ok = ok;
    return ok;
  }

  private leave(channel: string, listener: Listener): void {
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
    const made: unknown =
      this.client.isCluster === true
        ? this.client.duplicate(undefined, { shardedSubscribers: true, ...overrides })
        : // The subscriber renews its channels itself once ready again (whatever the client says).
          this.client.duplicate({ ...overrides, autoResubscribe: false });
    if (typeof (made as Partial<SubscriberConnection> | null)?.on !== 'function') {
      // A misbehaving client's answer (a promise, say) is no connection; a rejection it carries
      // is handled here rather than left unhandled.
      Promise.resolve(made).catch(() => {});
      throw new Error('the client duplicate() gave no connection');
    }
    const connection = made as SubscriberConnection;
    // Events of a connection closed on purpose (idle, shutdown) are not failures.
    connection.on('error', (error) => {
      if (this.connection === connection) this.fail(this.usable ? error : undefined);
    });
    connection.on('close', () => {
      if (this.connection === connection) this.fail(undefined);
    });
    connection.on('ready', () => {
      if (this.connection === connection) this.reconnected();
    });
    connection.on('smessage', (channel) => {
      for (const listener of this.channels.get(channel)?.listeners ?? []) listener.onMessage();
    });
    this.connection = connection;
    return connection;
  }

  /**
   * The connection is ready again after a failure: the cool-down is over, and every channel that
   * still has listeners and no SSUBSCRIBE in flight is subscribed again on it.
   */
  private reconnected(): void {
    if (this.failedAt === undefined) return;
    this.retryAt = 0;
    for (const [channel, entry] of this.channels) {
      if (entry.ok === false) entry.subscribed = this.subscribe(channel, entry);
    }
  }

  /**
   * Marks the subscriber unusable and wakes every listener, so that its waiter polls; `error`, if
   * any, is reported to the owner and to the listeners.
   */
  private fail(error: unknown): void {
    this.failedAt = Date.now();
    this.retryAt = this.failedAt + this.retryMs;
    const entries = [...this.channels.values()];
    // A subscription confirmed before may be gone with the connection: the next listener renews it.
    for (const entry of entries) if (entry.ok === true) entry.ok = false;
    const listeners = entries.flatMap((entry) => [...entry.listeners]);
    if (error !== undefined) {
      this.failures++;
      this.report(error, listeners);
    }
    for (const listener of listeners) listener.onMessage();
  }

  private report(error: unknown, listeners: readonly Listener[] = []): void {
    const reported = asError(error);
    this.options.onError?.(reported);
    for (const listener of listeners) listener.onError?.(reported);
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
