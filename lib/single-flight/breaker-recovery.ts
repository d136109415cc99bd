import { isConnected } from '../redis/client.js';

/** What the recovery uses of the lock's client, if it has it (ioredis's names). */
interface WatchedClient {
  readonly isCluster?: boolean;
  on?(event: 'ready', listener: () => void): unknown;
  off?(event: 'ready', listener: () => void): unknown;
  removeListener?(event: 'ready', listener: () => void): unknown;
  ping?(): Promise<unknown>;
}

export interface BreakerRecoveryOptions {
  /** A rejection means nothing to watch. */
  readonly client: () => Promise<unknown>;
  /** Told each time Redis was seen back: the client is ready again, or a check was answered. */
  readonly onBack: () => void;
}

/** How long after a check was answered (or failed) the next one is sent. */
const CHECK_MS = 500;

/**
 * Watches, while the breaker is open, for Redis to be back, so that its probe goes through then
 * rather than when `openSeconds` ends: the client emits `'ready'` (it reconnected), or a PING is
 * answered (a paused or partitioned server answers again on the same connection, which emits
 * nothing). One PING at a time, so a paused server gets no pile of them. A Cluster is watched for
 * `'ready'` only: its PING reaches any node, not the owner of the lock's slot.
 */
export class BreakerRecovery {
  /** Bumped by every start and stop: work begun for an older watch is dropped. */
  private watch = 0;
  private watching = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;

  constructor(private readonly options: BreakerRecoveryOptions) {}

  /** Starts watching, with PING checks or (`checks: false`) for `'ready'` only. */
  start(checks = true): void {
    if (this.closed || this.watching) return;
    this.watching = true;
    const watch = ++this.watch;
    this.options.client().then(
      (client) => {
        if (watch !== this.watch || typeof client !== 'object' || client === null) return;
        this.listen(client as WatchedClient);
        // A client that is ready already reconnected before the breaker opened: no 'ready' will
        // come, so the first check goes out at once rather than a whole CHECK_MS later.
        if (checks) this.check(client as WatchedClient, watch, isConnected(client));
      },
      () => {
        // No client to watch: the breaker's own clock lets the probe through.
      },
    );
  }

  stop(): void {
    this.watch++;
    this.watching = false;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  /** Stops for good (application shutdown): `start()` does nothing after it. */
  close(): void {
    this.closed = true;
    this.stop();
  }

  private listen(client: WatchedClient): void {
    if (typeof client.on !== 'function') return;
    const onReady = (): void => this.back();
    client.on('ready', onReady);
    this.unsubscribe = () => {
      if (typeof client.off === 'function') client.off('ready', onReady);
      else client.removeListener?.('ready', onReady);
    };
  }

  private check(client: WatchedClient, watch: number, now = false): void {
    if (typeof client.ping !== 'function' || client.isCluster === true) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        const answered = (async () => client.ping!())();
        answered.then(
          () => {
            if (watch !== this.watch) return;
            this.back();
            if (watch === this.watch) this.check(client, watch);
          },
          () => {
            if (watch === this.watch) this.check(client, watch);
          },
        );
      },
      now ? 0 : CHECK_MS,
    );
    // A watch never keeps the process alive.
    this.timer.unref();
  }

  private back(): void {
    try {
      this.options.onBack();
    } catch {
      // The owner's error is the owner's: the watch goes on.
    }
  }
}
