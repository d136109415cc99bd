import { Inject, Injectable } from '@nestjs/common';
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
import { connectTelling } from './redis/client-defaults.js';
import { BufferLockMessages } from './messages/buffer-lock-messages.js';
import { closeNodeRedis } from './redis/node-redis-client.js';

interface Closable {
  quit?: () => Promise<unknown>;
  disconnect?: () => void;
}

/** How long QUIT may take at shutdown before the connection is dropped. */
const QUIT_TIMEOUT_MS = 1000;

/**
 * The clients one `BufferLockModule` made (from a factory, a URL, ioredis options or `memory://`):
 * closed at shutdown. A client passed in is not (the engine closes its own subscriber).
 */
@Injectable()
export class BufferLockClients {
  private readonly made = new Set<LockClient>();

  constructor(@Inject(BufferLockMessages) private readonly messages: BufferLockMessages) {}

  factoryFor(connection: RedisConnection): LockClient | RedisClientFactory {
    if (typeof connection === 'function') return this.tracked(connection);
    if (isMemoryUrl(connection)) return this.tracked(() => memoryClient(connection));
    if (typeof connection === 'string' || !isScriptClient(connection)) {
      // A failed connect is retried on the next call.
      return this.tracked(() =>
        connectTelling(connection as string | RedisOptions, {}, this.messages),
      );
    }
    return connection;
  }

  async closeAll(): Promise<void> {
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
