import { batchingClient } from '../redis/batching-client.js';
import { isNodeRedisClient, type LockClient, type RedisClientFactory } from '../redis/client.js';
import { nodeRedisClient } from '../redis/node-redis-client.js';
import type { RedisScriptClient } from '../types/clients.js';
import { connectBy } from './client-connection.js';
import { UnsentReleases } from './unsent-releases.js';

/** The lock's client: given, or made by the factory on first use (never twice at once). */
export class LockConnection {
  client: RedisScriptClient | undefined;
  /** `client`, batched under load: the lock's own commands. */
  commands: RedisScriptClient | undefined;
  unsent: UnsentReleases | undefined;
  private connecting: Promise<void> | undefined;

  constructor(
    private readonly factory: () => RedisClientFactory,
    private readonly connectTimeout: number,
  ) {}

  use(given: LockClient): void {
    const client = isNodeRedisClient(given) ? nodeRedisClient(given) : (given as RedisScriptClient);
    this.client = client;
    this.commands = batchingClient(client);
    this.unsent = new UnsentReleases(client, this.commands);
  }

  /** Concurrent first calls share one attempt; a failed one is forgotten, to be tried again. */
  connect(): Promise<void> {
    if (this.client) return Promise.resolve();
    if (this.connecting) return this.connecting;
    const connecting = connectBy(this.factory(), this.connectTimeout, (c) => this.use(c));
    connecting.catch(() => {
      if (this.connecting === connecting) this.connecting = undefined;
    });
    this.connecting = connecting;
    return connecting;
  }
}
