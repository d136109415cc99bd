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
import { watchLiveness } from './subscriber-liveness.js';

const DEFAULT_IDLE_MS = 1000;
const DEFAULT_KEEP_MS = 30_000;
const DEFAULT_RETRY_MS = 1000;
/** Subscriptions kept with no listener, at most: beyond, the oldest is ended at once. */
const MAX_LINGERING = 1000;

const NOT_SUBSCRIBED: Promise<boolean> = Promise.resolve(false);

interface Listener {
  /** With the message's text; with none when the subscriber became unusable. */
  readonly onMessage: (text?: string) => void;
  readonly onError: ((error: Error) => void) | undefined;
  readonly onClosed: (() => void) | undefined;
}

interface Channel {
  readonly listeners: Set<Listener>;
  /** The answer to the last SSUBSCRIBE sent for the channel. */
  subscribed: Promise<boolean>;
  /** That answer once it came: `undefined` while it is pending. */
  ok: boolean | undefined;
}

/**
 * One pub/sub connection per client, shared by every key waited on in this process: a duplicate
 * of the client, made for the first listener. A channel's subscription outlives its last listener
 * by `idleMs` (the next wait on the key sends no SSUBSCRIBE); the connection outlives the last
 * subscription by `keepMs`, so that the next stampede's waiters find it open (no handshake on
 * their way), and its socket never keeps the process alive where the client exposes it (ioredis's
 * `stream`, node-redis's `unref()`). A lost connection or message is never an error for a waiter:
 * each keeps its own backstop timer.
 *
 * A refused SSUBSCRIBE (Redis 6, an ACL without `ssubscribe`) or a connection error or close makes
 * it unusable: every listener is called, as if its lock were released, so that its waiter polls
 * instead of waiting for a message that may never come. So does a Cluster's shard subscriber lost
 * (ioredis's `-node`), and a connection silent for a probe period (`watchLiveness`): that one is
 * dropped, and the next SSUBSCRIBE opens another. For `retryMs` after that, `listen` sends
 * nothing; a connection ready again ends that at once and renews every channel still listened to.
 */
export class ReleaseSubscriber {
  private connection: SubscriberConnection | undefined;
  private readonly channels = new Map<string, Channel>();
  /** Channels subscribed with no listener, oldest first, with when their last one left. */
  private readonly lingering = new Map<string, number>();
  private idleTimer: NodeJS.Timeout | undefined;
  private readonly idleMs: number;
  private readonly keepMs: number;
  /** When the last listener left. */
  private lastLeft = 0;
  private readonly retryMs: number;
  /** When the subscriber last became unusable; `undefined` while it is usable. */
  private failedAt: number | undefined;
  /** Before this time (ms) no SSUBSCRIBE is sent: the cool-down after a failure. */
  private retryAt = 0;
  /** Failures reported so far: an attempt begun before the last one is part of that failure. */
  private failures = 0;
  /** Whether an SSUBSCRIBE was answered on the connection since it was made or last failed. */
  private confirmed = false;
  private unwatch: () => void = () => {};

  constructor(
    private readonly client: DuplicableClient,
    private readonly options: ReleaseSubscriberOptions = {},
  ) {
    this.idleMs = options.idleMs ?? DEFAULT_IDLE_MS;
    this.keepMs = options.keepMs ?? DEFAULT_KEEP_MS;
    this.retryMs = options.retryMs ?? DEFAULT_RETRY_MS;
  }

  /** Whether a release would reach the listeners now. */
  get usable(): boolean {
    return this.failedAt === undefined;
  }

  /**
   * Calls `onMessage` with the text of every message on `channel`, and with none when the
   * subscriber becomes unusable; `onClosed` when the subscriber is closed (then it forgets the
   * listener).
   */
  listen(
    channel: string,
    onMessage: (text?: string) => void,
    onError?: (error: Error) => void,
    onClosed?: () => void,
  ): Listening {
    this.lingering.delete(channel);
    let entry = this.channels.get(channel);
    if (!entry) {
      entry = { listeners: new Set(), subscribed: NOT_SUBSCRIBED, ok: false };
      this.channels.set(channel, entry);
    }
    // Added first, so that it hears of a failure of the SSUBSCRIBE sent for it.
    const listener: Listener = { onMessage, onError, onClosed };
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

  /** Closes the connection now, whoever listens (shutdown). */
  close(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    const listeners = [...this.channels.values()].flatMap((entry) => [...entry.listeners]);
    this.channels.clear();
    this.lingering.clear();
    this.dropConnection();
    for (const listener of listeners) listener.onClosed?.();
  }

  private dropConnection(): void {
    const connection = this.connection;
    // Forgotten first: its own close event is no failure.
    this.connection = undefined;
    this.unwatch();
    this.confirmed = false;
    connection?.disconnect();
  }

  private mayTry(): boolean {
    return this.failedAt === undefined || Date.now() >= this.retryAt;
  }

  private async subscribe(channel: string, entry: Channel): Promise<boolean> {
    const attempt = this.failures;
    entry.ok = undefined;
    let ok: boolean;
    let connection: SubscriberConnection | undefined;
    try {
      connection = this.connect();
      await connection.ssubscribe(channel);
      // An answer on a connection let go since (silent, shut) counts for nothing, as its failure.
      ok = this.connection === connection;
      if (ok) this.confirmed = true;
    } catch (error) {
      ok = false;
      // Concurrent SSUBSCRIBEs fail alike: only the first of them is reported.
      if (!connection || this.connection === connection)
        this.fail(attempt === this.failures ? error : undefined);
    }
    if (ok) this.failedAt = undefined;
    entry.ok = ok;
    return ok;
  }

  private leave(channel: string, listener: Listener): void {
    const entry = this.channels.get(channel);
    if (!entry?.listeners.delete(listener) || entry.listeners.size > 0) return;
    this.lastLeft = Date.now();
    this.lingering.set(channel, this.lastLeft);
    if (this.lingering.size > MAX_LINGERING) this.drop(this.lingering.keys().next().value!);
    this.idleTimer ??= setTimeout(() => this.sweep(), this.idleMs).unref();
  }

  /** Ends the subscriptions idle for `idleMs`; `keepMs` after the last, the connection. */
  private sweep(): void {
    this.idleTimer = undefined;
    const now = Date.now();
    for (const [channel, since] of this.lingering) {
      if (since > now - this.idleMs) break;
      this.drop(channel);
    }
    if (this.lingering.size > 0) {
      this.idleTimer = setTimeout(() => this.sweep(), this.idleMs).unref();
    } else if (this.channels.size === 0 && this.connection) {
      const left = this.lastLeft + this.keepMs - now;
      if (left <= 0) return this.close();
      this.idleTimer = setTimeout(() => this.sweep(), left).unref();
    }
  }

  private drop(channel: string): void {
    const entry = this.channels.get(channel);
    this.lingering.delete(channel);
    this.channels.delete(channel);
    const connection = this.connection;
    if (!entry || !connection) return;
    // Wait for SSUBSCRIBE's answer first, so SUNSUBSCRIBE cannot overtake it.
    void entry.subscribed.then((ok) =>
      ok && this.connection === connection && !this.channels.has(channel)
        ? connection.sunsubscribe(channel).catch((error: unknown) => this.report(error))
        : undefined,
    );
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
      if (this.connection !== connection) return;
      unref(connection);
      this.reconnected();
    });
    const current = (): boolean => this.connection === connection;
    this.unwatch = watchLiveness(connection, this.client.isCluster === true, {
      confirmed: () => current() && this.confirmed,
      lost: () => this.fail(undefined),
      ready: () => {
        if (current()) this.reconnected();
      },
      // Dropped: the next SSUBSCRIBE opens another connection.
      silent: () => {
        this.dropConnection();
        this.fail(undefined);
      },
    });
    connection.on('smessage', (channel, text) => {
      const message = typeof text === 'string' ? text : undefined;
      for (const listener of this.channels.get(channel)?.listeners ?? [])
        listener.onMessage(message);
    });
    this.connection = connection;
    return connection;
  }

  /** Ready again after a failure: every channel with listeners and no SSUBSCRIBE in flight is renewed. */
  private reconnected(): void {
    if (this.failedAt === undefined) return;
    this.retryAt = 0;
    this.forgetLingering();
    for (const [channel, entry] of this.channels) {
      if (entry.ok === false) entry.subscribed = this.subscribe(channel, entry);
    }
  }

  /** Marks the subscriber unusable and wakes every listener, so that its waiter polls. */
  private fail(error: unknown): void {
    this.confirmed = false;
    this.failedAt = Date.now();
    this.retryAt = this.failedAt + this.retryMs;
    this.forgetLingering();
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

  /** A subscription with no listener may be gone with a failed connection: it is not renewed. */
  private forgetLingering(): void {
    for (const channel of this.lingering.keys()) this.channels.delete(channel);
    this.lingering.clear();
  }

  private report(error: unknown, listeners: readonly Listener[] = []): void {
    const reported = asError(error);
    this.options.onError?.(reported);
    for (const listener of listeners) listener.onError?.(reported);
  }
}

/** The connection's socket no longer keeps the process alive: waiters keep their own timers. */
function unref(connection: SubscriberConnection): void {
  try {
    if (typeof connection.unref === 'function') connection.unref();
    else (connection as { stream?: { unref?: () => void } }).stream?.unref?.();
  } catch {
    // A client without a socket of its own to let go of keeps the process alive while open.
  }
}

const subscribers = new WeakMap<object, ReleaseSubscriber>();

/** The one subscriber of `client` in this process; everything using the client shares it. */
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
