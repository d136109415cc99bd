import { isIoredisClient } from './client.js';
import { type RedisScriptClient } from '../types/clients.js';

type PipelinedCommand = [name: 'eval' | 'evalsha' | 'set', ...args: (string | number)[]];

// ioredis `pipeline(commands).exec()`: one `[error, reply]` pair per command.
interface PipelineClient extends RedisScriptClient {
  pipeline(commands: PipelinedCommand[]): {
    exec(): Promise<[error: Error | null, reply: unknown][] | null>;
  };
  readonly isCluster?: boolean;
  readonly options?: { readonly enableAutoPipelining?: boolean };
}

/** A reply the lock cannot read (no `[error, reply]` pair); the service words it as a bad reply. */
export class BadReply extends Error {
  constructor() {
    super('unexpected reply');
  }
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
 * is waiting for Redis goes out at once; one sent while others wait joins a pipeline written at
 * the end of this turn (`setImmediate`). Replies, errors and order stay each command's own.
 * Anything but a plain ioredis client (whose `pipeline()` may mean something else) is returned as
 * it is.
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
