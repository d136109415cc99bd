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

interface Pingable {
  ping(): unknown;
}

interface ShardSubscriber {
  getInstance?(): { status?: unknown; ping?: unknown } | null;
}

/**
 * What a PING must reach: the connection itself, or an ioredis `Cluster`'s shard subscriber
 * connections (its own PING would reach a node's command connection): none where they cannot be
 * found, and then only the events count.
 */
function pingTargets(connection: SubscriberConnection, cluster: boolean): Pingable[] {
  if (!cluster) return typeof connection.ping === 'function' ? [connection as Pingable] : [];
  const group = (connection as { shardedSubscribers?: { shardedSubscribers?: unknown } })
    .shardedSubscribers?.shardedSubscribers;
  if (!(group instanceof Map)) return [];
  const targets: Pingable[] = [];
  for (const shard of group.values() as Iterable<ShardSubscriber>) {
    const instance = typeof shard?.getInstance === 'function' ? shard.getInstance() : null;
    if (instance?.status === 'ready' && typeof instance.ping === 'function') {
      targets.push(instance as Pingable);
    }
  }
  return targets;
}

/**
 * Watches a subscriber connection for the losses its `error` and `close` do not tell: ioredis
 * `Cluster` reports a shard subscriber's end as `-node` (`-subscriber` when it replaces one), and a
 * partitioned or half-open socket tells nothing at all, so a PING is sent on each subscriber
 * connection every `PROBE_MS` while a subscription is confirmed. One unref'd timer per
 * connection, and nothing on a cache hit; the function returned stops it.
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
    const targets = pingTargets(connection, cluster);
    if (targets.length === 0) return;
    const sent: Promise<unknown> = (pinging = Promise.all(
      // A refused PING is an answer; a closed connection says so itself.
      targets.map((target) => new Promise((resolve) => resolve(target.ping())).catch(() => {})),
    ).finally(() => {
      if (pinging === sent) pinging = undefined;
    }));
  };
  const timer = setInterval(probe, PROBE_MS).unref();
  return () => {
    stopped = true;
    clearInterval(timer);
  };
}
