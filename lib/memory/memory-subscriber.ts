import { EventEmitter } from 'node:events';
import type { SubscriberConnection } from '../types/clients.js';
import type { ChannelListener, MemoryKeyspace } from './keyspace.js';
import { asSent } from './wire.js';

/**
 * What ioredis rejects a command on a closed connection with, and so does `memory://`.
 *
 * @example
 * ```ts
 * await client.quit();
 * await client.get('k').catch((error: Error) => error.message === CONNECTION_CLOSED); // true
 * ```
 */
export const CONNECTION_CLOSED = 'Connection is closed.';

/**
 * The pub/sub connection of `memory://` (what `MemoryClient.duplicate()` gives): SSUBSCRIBE and
 * SUNSUBSCRIBE on its keyspace's channels, an `'smessage'` event for every SPUBLISH there (a
 * release wakes its waiters as with Redis), and once disconnected, no more messages and a
 * rejection for every command, as ioredis does.
 *
 * @example
 * ```ts
 * const subscriber = new MemorySubscriber(keyspace);
 * subscriber.on('smessage', (channel, message) => console.log(channel, message));
 * await subscriber.ssubscribe('buffer:lock:9a03');
 * ```
 */
export class MemorySubscriber
  extends EventEmitter
  implements SubscriberConnection, ChannelListener
{
  private readonly subscribed = new Set<string>();
  private closed = false;

  constructor(private readonly keyspace: MemoryKeyspace) {
    super();
  }

  /** Resolves how many channels the connection is subscribed to after it, as Redis answers. */
  ssubscribe(...channels: string[]): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error(CONNECTION_CLOSED));
    for (const channel of channels.map(asSent)) {
      this.subscribed.add(channel);
      this.keyspace.subscribe(channel, this);
    }
    return Promise.resolve(this.subscribed.size);
  }

  /** Resolves how many channels the connection is still subscribed to. */
  sunsubscribe(...channels: string[]): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error(CONNECTION_CLOSED));
    const leaving = channels.length > 0 ? channels.map(asSent) : [...this.subscribed];
    for (const channel of leaving) {
      this.subscribed.delete(channel);
      this.keyspace.unsubscribe(channel, this);
    }
    return Promise.resolve(this.subscribed.size);
  }

  /** Closes the connection: its subscriptions end and messages still on their way are dropped. */
  disconnect(): void {
    if (this.closed) return;
    this.closed = true;
    for (const channel of this.subscribed) this.keyspace.unsubscribe(channel, this);
    this.subscribed.clear();
    this.emit('close');
  }

  /** A message the keyspace published on a channel this connection is subscribed to. */
  deliver(channel: string, message: string): void {
    if (!this.closed) this.emit('smessage', channel, message);
  }
}
