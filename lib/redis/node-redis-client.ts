import { EventEmitter } from 'node:events';
import type {
  RedisScriptClient,
  SubscriberConnection,
  WriterConnection,
} from '../types/clients.js';
import { fieldOf } from './client.js';

interface ScriptOptions {
  readonly keys: string[];
  readonly arguments: string[];
}

// oxlint-disable-next-line no-explicit-any -- node-redis listeners take any arguments
type Listener = (...args: any[]) => void;

// What the library calls on a node-redis client or cluster (v5, v6).
interface NodeRedis {
  eval(script: string, options: ScriptOptions): Promise<unknown>;
  evalSha(sha: string, options: ScriptOptions): Promise<unknown>;
  set(
    key: string,
    value: string,
    options: { expiration: { type: 'PX'; value: number }; condition: 'NX' },
  ): Promise<unknown>;
  ping(): Promise<unknown>;
  /** A client's `(args)`, a cluster's `(firstKey, isReadonly, args)`. */
  sendCommand(...args: unknown[]): Promise<unknown>;
  /** A cluster's client of the master of `key`'s slot (node-redis 6). */
  getNodeClientForKey?(key: string): Promise<NodeRedis>;
  duplicate(): NodeRedis;
  connect(): Promise<unknown>;
  destroy(): void;
  close(): Promise<unknown>;
  sSubscribe(
    channels: string,
    listener: (message: string, channel: string) => void,
  ): Promise<unknown>;
  sUnsubscribe(
    channels: string,
    listener: (message: string, channel: string) => void,
  ): Promise<unknown>;
  on(event: string, listener: Listener): unknown;
  off(event: string, listener: Listener): unknown;
  readonly isOpen: boolean;
}

const isNodeRedisCluster = (client: NodeRedis): boolean =>
  typeof fieldOf(client, 'getSlotMaster') === 'function';

const attempt = (call: () => unknown): Promise<unknown> => {
  try {
    return Promise.resolve(call());
  } catch (error) {
    return Promise.reject(error);
  }
};

// node-redis refuses numbers.
const scriptOptions = (numkeys: number, args: readonly (string | number)[]): ScriptOptions => ({
  keys: args.slice(0, numkeys).map(String),
  arguments: args.slice(numkeys).map(String),
});

// ioredis's event names → node-redis's.
const EVENTS: Readonly<Record<'client' | 'cluster', Readonly<Record<string, string>>>> = {
  // A cluster has no 'ready' of its own; a node ready again (a restart) is the sign.
  client: { ready: 'ready', close: 'end', error: 'error' },
  // A node's connection lost (a shard's pub/sub one too) is ioredis Cluster's `-node`.
  cluster: {
    ready: 'node-ready',
    close: 'disconnect',
    error: 'error',
    '-node': 'node-reconnecting',
  },
};

// ioredis's pub/sub surface on a duplicate connected on first use; never throws.
function subscriberConnection(
  client: NodeRedis,
  events: Readonly<Record<string, string>>,
): SubscriberConnection {
  const emitter = new EventEmitter();
  // An 'error' with no listener would throw from emit(): the subscriber listens, but not first.
  emitter.on('error', () => {});
  let connection: NodeRedis | undefined;
  let connected: Promise<unknown> | undefined;
  const onMessage = (message: string, channel: string): void => {
    emitter.emit('smessage', channel, message);
  };
  const open = (): Promise<unknown> => {
    if (connected) return connected;
    connected = attempt(() => {
      const made = client.duplicate();
      connection = made;
      for (const [ours, theirs] of Object.entries(events)) {
        made.on(theirs, ((...args: unknown[]) => emitter.emit(ours, ...args)) as Listener);
      }
      return made.connect();
    });
    // A connect that fails rejects every SSUBSCRIBE sent meanwhile; this copy is nobody's.
    connected.catch(() => {});
    return connected;
  };
  const on = (event: string, listener: Listener): void => {
    emitter.on(event, listener);
  };
  return {
    ssubscribe: (channel: string) => open().then(() => connection!.sSubscribe(channel, onMessage)),
    sunsubscribe: (channel: string) =>
      open().then(() => connection!.sUnsubscribe(channel, onMessage)),
    on: on as unknown as SubscriberConnection['on'],
    ping: () => open().then(() => connection!.ping()),
    // node-redis's own: its socket, made again on reconnect, no longer keeps the process alive.
    unref: () => (connection as { unref?: () => void } | undefined)?.unref?.(),
    disconnect: () => {
      emitter.removeAllListeners();
      emitter.on('error', () => {});
      try {
        if (connection?.isOpen) connection.destroy();
      } catch {
        // a connection that cannot be destroyed is dropped all the same
      }
    },
  };
}

const adapters = new WeakMap<object, RedisScriptClient>();

/**
 * A node-redis client in the ioredis shape the library drives. node-redis writes one turn's
 * commands together by itself, so nothing is batched. One adapter per client, so that everything
 * using the client shares one subscriber.
 */
export function nodeRedisClient(client: object): RedisScriptClient {
  const known = adapters.get(client);
  if (known) return known;
  const redis = client as NodeRedis;
  const cluster = isNodeRedisCluster(redis);
  const events = EVENTS[cluster ? 'cluster' : 'client'];
  const adapter = {
    isCluster: cluster,
    eval: (script: string, numkeys: number, ...args: (string | number)[]) =>
      attempt(() => redis.eval(script, scriptOptions(numkeys, args))),
    evalsha: (sha: string, numkeys: number, ...args: (string | number)[]) =>
      attempt(() => redis.evalSha(sha, scriptOptions(numkeys, args))),
    set: (key: string, value: string, _px: 'PX', milliseconds: number, _nx: 'NX') =>
      attempt(() =>
        redis.set(key, value, {
          expiration: { type: 'PX', value: milliseconds },
          condition: 'NX',
        }),
      ),
    ping: () => attempt(() => redis.ping()),
    on: (event: string, listener: Listener) => redis.on(events[event] ?? event, listener),
    off: (event: string, listener: Listener) => redis.off(events[event] ?? event, listener),
    // ioredis's arguments (overrides, startup nodes) mean nothing here: a plain duplicate.
    duplicate: () => subscriberConnection(redis, events),
    writer: () => writerConnection(redis, cluster),
  };
  adapters.set(client, adapter);
  return adapter;
}

/**
 * WAIT on the connection that wrote `key`. node-redis 6 sends a cluster's WAIT to every shard
 * (its command policy), so it goes to the key's master's own client; node-redis 5 routes it by key.
 */
async function waitOn(
  made: NodeRedis,
  cluster: boolean,
  key: string,
  wait: string[],
): Promise<unknown> {
  if (!cluster) return made.sendCommand(wait);
  if (typeof made.getNodeClientForKey !== 'function') return made.sendCommand(key, false, wait);
  return (await made.getNodeClientForKey(key)).sendCommand(wait);
}

// A connected duplicate, whose failures reach the writes as rejections.
async function writerConnection(redis: NodeRedis, cluster: boolean): Promise<WriterConnection> {
  const made = redis.duplicate();
  // Unheard, node-redis would throw them.
  made.on('error', () => {});
  await made.connect();
  return {
    client: nodeRedisClient(made),
    replicas: (key, wanted, timeoutMs) =>
      waitOn(made, cluster, key, ['WAIT', String(wanted), String(timeoutMs)]),
    close: () => void closeNodeRedis(made, 1000),
  };
}

/** `close()`, then `destroy()` if it takes over `timeoutMs`; never rejects. */
export async function closeNodeRedis(client: object, timeoutMs: number): Promise<void> {
  const redis = client as NodeRedis;
  let timer: NodeJS.Timeout | undefined;
  try {
    if (!redis.isOpen) return;
    await Promise.race([
      attempt(() => redis.close()),
      new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs))),
    ]);
  } catch {
    // a client that cannot say goodbye is destroyed below
  } finally {
    clearTimeout(timer);
    try {
      if (redis.isOpen) redis.destroy();
    } catch {
      // nothing more to do
    }
  }
}
