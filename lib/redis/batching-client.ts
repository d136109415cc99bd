import { Writable } from 'node:stream';
import { isIoredisClient } from './client.js';
import { type RedisScriptClient } from '../types/clients.js';

interface CorkableClient extends RedisScriptClient {
  readonly status?: string;
  /** The connection's socket: corked, its writes leave together once uncorked. */
  readonly stream?: unknown;
  readonly isCluster?: boolean;
  readonly options?: { readonly enableAutoPipelining?: boolean };
}

const canBatch = (client: RedisScriptClient): client is CorkableClient => {
  const candidate = client as Partial<CorkableClient>;
  return (
    // Only ioredis (and its forks) is known to write each command to its socket, `stream`.
    isIoredisClient(client) &&
    typeof client.evalsha === 'function' &&
    typeof client.set === 'function' &&
    // A Cluster writes to one socket per node.
    candidate.isCluster !== true &&
    // ioredis batches by itself then.
    candidate.options?.enableAutoPipelining !== true
  );
};

/**
 * The lock's commands on `client`, written together under load: a command sent while none of the
 * lock's is waiting for Redis goes out at once; one sent while others wait corks the connection's
 * socket until the end of this turn (`setImmediate`), so the commands of a turn leave in one write.
 * Each is still the client's own command, with its own reply, error and order. Anything but a plain
 * ioredis client is returned as it is.
 */
export function batchingClient(client: RedisScriptClient): RedisScriptClient {
  if (!canBatch(client)) return client;
  let waiting = 0;
  let corked: Writable | undefined;
  let inBatch = 0;
  let flushing = false;

  const settled = (): void => {
    waiting--;
  };
  // Node's own cork and uncork, whatever the instance says: a socket never stays corked.
  const uncork = (): void => {
    const stream = corked;
    corked = undefined;
    inBatch = 0;
    if (stream) Writable.prototype.uncork.call(stream);
  };
  const endOfTurn = (): void => {
    flushing = false;
    uncork();
  };
  // Only a Node stream, and only on a ready connection: before that, ioredis queues by itself.
  const cork = (): void => {
    if (waiting === 0 || corked !== undefined) return;
    let stream: unknown;
    try {
      stream = client.status === 'ready' ? client.stream : undefined;
    } catch {
      return;
    }
    if (!(stream instanceof Writable)) return;
    Writable.prototype.cork.call(stream);
    corked = stream;
    if (!flushing) {
      flushing = true;
      setImmediate(endOfTurn);
    }
  };
  const sent = (reply: unknown): Promise<unknown> => {
    const settles = Promise.resolve(reply);
    waiting++;
    settles.then(settled, settled);
    // Once the batch holds as many commands as Redis has left of ours, it leaves at once, so that
    // Redis works on it while this turn writes the next: the two processes overlap instead of
    // taking turns, at one write more per turn.
    if (corked !== undefined && ++inBatch * 2 >= waiting) uncork();
    return settles;
  };
  return {
    eval: (script, numkeys, ...args) => {
      cork();
      return sent(client.eval(script, numkeys, ...args));
    },
    evalsha: (sha, numkeys, ...args) => {
      cork();
      return sent(client.evalsha!(sha, numkeys, ...args));
    },
    set: (key, value, px, milliseconds, nx) => {
      cork();
      return sent(client.set!(key, value, px, milliseconds, nx));
    },
  };
}
