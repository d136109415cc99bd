import { BadReply } from './bad-reply.js';
import { isIoredisClient } from './client.js';
import { type RedisScriptClient } from '../types/clients.js';

/** One command as ioredis `pipeline([...])` takes it: the name, then the arguments. */
type PipelinedCommand = [name: 'eval' | 'evalsha' | 'set', ...args: (string | number)[]];

/**
 * What batching needs of a client: ioredis `Redis.pipeline(commands)`, whose `exec()` writes every
 * command in one go and resolves to one `[error, reply]` pair per command.
 *
 * @example
 * ```ts
 * const client: PipelineClient = new Redis();
 * ```
 */
export interface PipelineClient extends RedisScriptClient {
  pipeline(commands: PipelinedCommand[]): {
    exec(): Promise<[error: Error | null, reply: unknown][] | null>;
  };
  readonly isCluster?: boolean;
  readonly options?: { readonly enableAutoPipelining?: boolean };
}

interface Pending {
  readonly command: PipelinedCommand;
  readonly resolve: (reply: unknown) => void;
  readonly reject: (error: unknown) => void;
}

const canBatch = (client: RedisScriptClient): client is PipelineClient => {
  const candidate = client as Partial<PipelineClient>;
  return (
    // Only ioredis (and its forks) is known to take `pipeline(commands)` and answer with `exec()`.
    isIoredisClient(client) &&
    typeof client.evalsha === 'function' &&
    typeof client.set === 'function' &&
    // A Cluster pipeline must keep to one slot, and lock keys spread over all of them.
    candidate.isCluster !== true &&
    // ioredis batches by itself then.
    candidate.options?.enableAutoPipelining !== true
  );
};

/**
 * The lock's commands on `client`, batched under load: a command sent while none of the lock's
 * commands is waiting for Redis goes out at once (one caller at a time pays no delay); one sent
 * while others are waiting joins a queue that is written as one pipeline at the end of the current
 * event-loop turn (`setImmediate`). Many concurrent acquires and releases then cost one write
 * and one read of the socket, for Node and for Redis, instead of one each. Replies, errors
 * (NOSCRIPT, command timeouts) and order are each command's own, as if sent alone.
 *
 * Returns `client` itself when it is not an ioredis client (eval-only clients, and any other
 * object with a `pipeline` method: its `pipeline()` may mean something else), is a Cluster, or auto-pipelines already (`enableAutoPipelining`). Only calls the client's methods; it
 * never changes the client.
 *
 * @example
 * ```ts
 * const commands = batchingClient(new Redis());
 * await Promise.all(keys.map((key) => acquireLock(commands, key, token(), 30_000)));
 * ```
 */
export function batchingClient(client: RedisScriptClient): RedisScriptClient {
  if (!canBatch(client)) return client;
  let queue: Pending[] = [];
  let scheduled = false;
  let waiting = 0;

  const settled = (): void => {
    waiting--;
  };
  const flush = (): void => {
    scheduled = false;
    const batch = queue;
    queue = [];
    waiting += batch.length;
    let replies: unknown;
    try {
      replies = client.pipeline(batch.map((p) => p.command)).exec();
    } catch (error) {
      replies = Promise.reject(error);
    }
    // Promise.resolve: a misbehaving client's exec() may answer no promise, or a thenable that
    // throws; every queued command settles all the same, and nothing is thrown in setImmediate.
    Promise.resolve(replies).then(
      (results: unknown) => {
        waiting -= batch.length;
        batch.forEach((pending, i) => {
          const result: unknown = Array.isArray(results) ? results[i] : undefined;
          if (!Array.isArray(result)) {
            pending.reject(new BadReply());
            return;
          }
          const [error, reply] = result as [unknown, unknown];
          if (error) pending.reject(error);
          else pending.resolve(reply);
        });
      },
      (error: unknown) => {
        waiting -= batch.length;
        for (const pending of batch) pending.reject(error);
      },
    );
  };
  /** Nothing of the lock's is waiting for Redis: a command goes out at once. */
  const idle = (): boolean => waiting === 0 && queue.length === 0;
  const sent = (reply: unknown): Promise<unknown> => {
    const settles = Promise.resolve(reply);
    waiting++;
    settles.then(settled, settled);
    return settles;
  };
  const queued = (command: PipelinedCommand): Promise<unknown> =>
    new Promise((resolve, reject) => {
      queue.push({ command, resolve, reject });
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    });
  return {
    eval: (script, numkeys, ...args) =>
      idle()
        ? sent(client.eval(script, numkeys, ...args))
        : queued(['eval', script, numkeys, ...args]),
    evalsha: (sha, numkeys, ...args) =>
      idle()
        ? sent(client.evalsha!(sha, numkeys, ...args))
        : queued(['evalsha', sha, numkeys, ...args]),
    set: (key, value, px, milliseconds, nx) =>
      idle()
        ? sent(client.set!(key, value, px, milliseconds, nx))
        : queued(['set', key, value, px, milliseconds, nx]),
  };
}
