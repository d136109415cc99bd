import { Injectable } from '@nestjs/common';
import type { RedisOptions } from 'ioredis';
import { memoryClient } from './memory/memory-client.js';
import { isMemoryUrl } from './memory/memory-url.js';
import type { RedisConnection } from './options/buffer-lock.options.js';
import {
  isNodeRedisClient,
  isScriptClient,
  type LockClient,
  type RedisClientFactory,
} from './redis/client.js';
import { type RedisScriptClient } from './types/clients.js';
import { connectFailFast } from './redis/client-defaults.js';
import { closeNodeRedis } from './redis/node-redis-client.js';
import { releaseSubscriberFor, type DuplicableClient } from './single-flight/release-subscriber.js';

interface Closable {
  quit?: () => Promise<unknown>;
  disconnect?: () => void;
}

/** How long a polite QUIT may take at shutdown before the connection is simply dropped. */
const QUIT_TIMEOUT_MS = 1000;

/**
 * The Redis clients one `BufferLockModule` made itself: from a factory, or from a URL or ioredis
 * options (then with `FAIL_FAST_CLIENT_DEFAULTS`), or the in-memory client of a `memory://` URL.
 * They are quit at application shutdown. A client object the user passed in is never tracked, so
 * it is left alone.
 *
 * @example
 * ```ts
 * const clients = new BufferLockClients();
 * new RedisLockService({ redis: clients.factoryFor('redis://127.0.0.1:6379') });
 * await clients.closeAll(); // at shutdown
 * ```
 */
@Injectable()
export class BufferLockClients {
  private readonly made = new Set<LockClient>();
  private readonly subscribed = new Set<RedisScriptClient>();

  /**
   * `getClient` as the wake-on-release wait strategy takes it, noting the client so that its
   * subscriber connection (a duplicate the library made, also of a client you passed in) is closed
   * at shutdown.
   */
  subscribingThrough(
    getClient: () => Promise<RedisScriptClient>,
  ): () => Promise<RedisScriptClient> {
    return async () => {
      const client = await getClient();
      this.subscribed.add(client);
      return client;
    };
  }

  /** `connection` as the lock service takes it: a client as is, anything else a tracked factory. */
  factoryFor(connection: RedisConnection): LockClient | RedisClientFactory {
    if (typeof connection === 'function') return this.tracked(connection);
    if (isMemoryUrl(connection)) return this.tracked(() => memoryClient(connection));
    if (typeof connection === 'string' || !isScriptClient(connection)) {
      // Built here, so with the fail-fast settings; a failed connect is retried on the next call.
      return this.tracked(() => connectFailFast(connection as string | RedisOptions));
    }
    return connection;
  }

  /** Closes the subscriber connections, then quits every client made so far; one that does not answer in time is disconnected. */
  async closeAll(): Promise<void> {
    for (const client of this.subscribed) {
      releaseSubscriberFor(client as unknown as DuplicableClient).close();
    }
    this.subscribed.clear();
    const clients = [...this.made];
    this.made.clear();
    await Promise.all(
      clients.map((client) =>
        // node-redis's disconnect() answers a promise (and rejects when closed): close it its way.
        isNodeRedisClient(client)
          ? closeNodeRedis(client, QUIT_TIMEOUT_MS)
          : close(client as Closable),
      ),
    );
  }

  private tracked(factory: RedisClientFactory): RedisClientFactory {
    return () => {
      const made = factory();
      // A client is handed on as it is: one that has a `then` (a Proxy sending every property as
      // a command) must not be resolved as a promise.
      if (isScriptClient(made)) {
        this.made.add(made);
        return made;
      }
      return Promise.resolve(made).then((client) => {
        if (client) this.made.add(client);
        return client;
      });
    };
  }
}

async function close(client: Closable): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    if (typeof client.quit === 'function') {
      await Promise.race([
        client.quit(),
        new Promise((resolve) => (timer = setTimeout(resolve, QUIT_TIMEOUT_MS))),
      ]);
    }
  } catch {
    // a client that cannot say goodbye is dropped below
  } finally {
    clearTimeout(timer);
    if (typeof client.disconnect === 'function') client.disconnect();
  }
}
