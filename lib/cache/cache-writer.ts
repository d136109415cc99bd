import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { WriteReplicasSettings } from '../options/write-replicas.options.js';
import { replicaWriterFor } from '../redis/replica-wait.js';
import type { RedisScriptClient } from '../types/clients.js';

/**
 * Where the cache's writes to the lock's Redis go (`run`), and when one counts as done: once that
 * Redis answered, or with `writeReplicas` once that many replicas have it too, so that a
 * fail-over keeps it. A write they do not confirm in time rejects: it may be lost.
 */
export interface CacheWriter {
  /** Runs `write`, which writes `key` (and keys of its slot). */
  run(key: string, write: (client: RedisScriptClient) => Promise<unknown>): Promise<void>;
}

export function cacheWriter(
  client: () => Promise<RedisScriptClient>,
  settings: WriteReplicasSettings,
  messages: BufferLockMessages,
): CacheWriter {
  if (!settings) return { run: async (_key, write) => void (await write(await client())) };
  const { replicas, timeout } = settings;
  return {
    run: async (key, write) => {
      const writer = replicaWriterFor(await client());
      const done = await writer.write(key, write, replicas, timeout * 1000);
      if ('unsupported' in done) throw new Error(messages.render('cache_replicas_unsupported'));
      if (done.acked < replicas) {
        const params = { ACKED: done.acked, REPLICAS: replicas, SECONDS: timeout };
        throw new Error(messages.render('cache_write_unreplicated', params));
      }
    },
  };
}
