import type { SubscriberConnection } from '../types/clients.js';

/** The connection's PING period: one unanswered at the next tick makes it silent (within 2 ticks). */
export const PROBE_MS = 400;

export interface LivenessHooks {
  /** Whether a subscription is confirmed on the connection now: only then is anything lost. */
  readonly confirmed: () => boolean;
  /** A Cluster's shard subscriber was lost (killed, closed): its subscriptions went with it. */
  readonly lost: () => void;
  /** A Cluster's shard subscribers are connected again. */
  readonly ready: () => void;
  /** A PING was left unanswered for a probe period: the connection is silent (a partition). */
  readonly silent: () => void;
}

/**
 * Watches a subscriber connection for the losses its `error` and `close` do not tell: ioredis
 * `Cluster` reports a shard subscriber's end as `-node` (`-subscriber` when it replaces one), and a
 * partitioned or half-open socket tells nothing at all, so a PING is sent each `PROBE_MS` while a
 * subscription is confirmed. A Cluster's PING would reach a node, not its shard subscribers: there
 * only the events count. One unref'd timer per connection; the function returned stops it.
 */
export function watchLiveness(
  connection: SubscriberConnection,
  cluster: boolean,
  hooks: LivenessHooks,
): () => void {
  const events = connection as unknown as { on(event: string, listener: () => void): unknown };
  for (const event of ['-node', '-subscriber']) {
    events.on(event, () => {
      if (hooks.confirmed()) hooks.lost();
    });
  }
  events.on('subscribersReady', () => hooks.ready());
  const ping = connection.ping;
  if (cluster || typeof ping !== 'function') return () => {};
  let pinging: Promise<unknown> | undefined;
  let stopped = false;
  const probe = (): void => {
    if (!hooks.confirmed()) return void (pinging = undefined);
    const waited = pinging;
    if (waited) {
      // Judged once the replies already received are read: a late tick is no silence.
      setImmediate(() => {
        if (!stopped && pinging === waited && hooks.confirmed()) hooks.silent();
      });
      return;
    }
    const sent: Promise<unknown> = (pinging = new Promise((resolve) =>
      resolve(ping.call(connection)),
    )
      // A refused PING is an answer; a closed connection says so itself.
      .catch(() => {})
      .finally(() => {
        if (pinging === sent) pinging = undefined;
      }));
  };
  const timer = setInterval(probe, PROBE_MS).unref();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
