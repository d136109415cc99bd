import { EventEmitter } from 'node:events';
import type { RedisScriptClient } from '../types/clients.js';
import type { SubscriberConnection } from '../types/clients.js';

/** `value[name]`, or `undefined` when reading it throws (a getter or a Proxy trap). */
const fieldOf = (value: object, name: string): unknown => {
  try {
    return (value as Record<string, unknown>)[name];
  } catch {
    return undefined;
  }
};

/** What a node-redis script command takes: keys and arguments apart, every one a string. */
interface ScriptOptions {
  readonly keys: string[];
  readonly arguments: string[];
}

// oxlint-disable-next-line no-explicit-any -- node-redis listeners take any arguments
type Listener = (...args: any[]) => void;

/**
 * The part of a node-redis client (`createClient()`) or cluster (`createCluster()`) of the `redis`
 * package (v5, v6) the library uses.
 */
interface NodeRedis {
  eval(script: string, options: ScriptOptions): Promise<unknown>;
  evalSha(sha: string, options: ScriptOptions): Promise<unknown>;
  set(
    key: string,
    value: string,
    options: { expiration: { type: 'PX'; value: number }; condition: 'NX' },
  ): Promise<unknown>;
  ping(): Promise<unknown>;
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

/**
 * A node-redis client or cluster (`createClient()`, `createCluster()` of the `redis` package), as
 * the lock's options type it: the members that tell one apart. What the lock calls on it is
 * checked when it is given ({@link isNodeRedisClient}).
 *
 * @example
 * ```ts
 * const client: NodeRedisConnection = await createClient({ url: process.env.REDIS_URL }).connect();
 * ```
 */
export interface NodeRedisConnection {
  readonly isOpen: boolean;
  sendCommand(...args: never[]): unknown;
  evalSha(...args: never[]): unknown;
  sSubscribe(...args: never[]): unknown;
}

const METHODS = [
  'eval',
  'evalSha',
  'set',
  'duplicate',
  'connect',
  'destroy',
  'sSubscribe',
  'sUnsubscribe',
  'on',
  'off',
] as const;

/**
 * Whether `value` looks like a node-redis client or cluster (`sendCommand()` with an `isOpen`
 * flag), whether or not it has all the library needs.
 *
 * @example
 * ```ts
 * looksLikeNodeRedis(createClient()); // true
 * looksLikeNodeRedis(new Redis()); // false: ioredis has no isOpen
 * ```
 */
export const looksLikeNodeRedis = (value: object): boolean =>
  typeof fieldOf(value, 'sendCommand') === 'function' &&
  typeof fieldOf(value, 'isOpen') === 'boolean';

/**
 * Whether `value` is a node-redis client or cluster of the `redis` package (v5 or v6) with every
 * method the library calls: `eval` and `evalSha` with `{ keys, arguments }`, `set` with
 * `{ expiration, condition }`, `duplicate`, `connect`, `destroy`, `sSubscribe`, `sUnsubscribe`,
 * `on` and `off`. Such a client is driven through {@link nodeRedisClient}.
 *
 * @example
 * ```ts
 * isNodeRedisClient(createClient()); // true
 * isNodeRedisClient(new Redis()); // false: ioredis
 * ```
 */
export const isNodeRedisClient = (value: unknown): boolean =>
  typeof value === 'object' &&
  value !== null &&
  looksLikeNodeRedis(value) &&
  METHODS.every((name) => typeof fieldOf(value, name) === 'function');

/** A node-redis cluster has `getSlotMaster()`; a single client has not. */
const isNodeRedisCluster = (client: NodeRedis): boolean =>
  typeof fieldOf(client, 'getSlotMaster') === 'function';

/** A call that may throw, as a promise: a client that throws gives a rejection. */
const attempt = (call: () => unknown): Promise<unknown> => {
  try {
    return Promise.resolve(call());
  } catch (error) {
    return Promise.reject(error);
  }
};

/** ioredis's `(numkeys, ...keys, ...args)` as node-redis takes it; node-redis refuses numbers. */
const scriptOptions = (numkeys: number, args: readonly (string | number)[]): ScriptOptions => ({
  keys: args.slice(0, numkeys).map(String),
  arguments: args.slice(numkeys).map(String),
});

/** The client's events the library listens to, under ioredis's names, with node-redis's names. */
const EVENTS: Readonly<Record<'client' | 'cluster', Readonly<Record<string, string>>>> = {
  // A cluster has no 'ready' of its own; a node ready again (a restart) is the sign.
  client: { ready: 'ready', close: 'end', error: 'error' },
  cluster: { ready: 'node-ready', close: 'disconnect', error: 'error' },
};

/**
 * A pub/sub connection on a duplicate of `client`, as the release subscriber drives it: ioredis's
 * `ssubscribe`, `sunsubscribe`, `'smessage'`, `'ready'`, `'error'` and `'close'` events and
 * `disconnect()`. The duplicate is connected on first use; node-redis hands sharded messages to a
 * listener, which re-emits them as `'smessage'`. Never throws: failures are rejections or
 * `'error'` events.
 */
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
  const subscriber: SubscriberConnection = {
    ssubscribe: (channel: string) => open().then(() => connection!.sSubscribe(channel, onMessage)),
    sunsubscribe: (channel: string) =>
      open().then(() => connection!.sUnsubscribe(channel, onMessage)),
    on: on as unknown as SubscriberConnection['on'],
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
  return subscriber;
}

const adapters = new WeakMap<object, RedisScriptClient>();

/**
 * `client`, a node-redis client or cluster ({@link isNodeRedisClient}), as the ioredis-shaped
 * client the library drives: `eval(script, numkeys, ...args)` and `evalsha` by node-redis's
 * `eval` and `evalSha` (NOSCRIPT is node-redis's error reply, which `runScript` answers by EVAL),
 * `set(key, value, 'PX', ms, 'NX')`, `ping()`, `on`/`off` for `'ready'`, and `duplicate()` giving
 * the release subscriber its own pub/sub connection. Commands are sent at once: node-redis writes
 * the commands of one event-loop turn together by itself. Errors (a closed client, a lost socket,
 * a timeout) are the client's own rejections. One adapter per client, so that everything using the
 * client shares one subscriber. The client is never changed.
 *
 * @example
 * ```ts
 * const client = await createClient({ url: process.env.REDIS_URL }).connect();
 * await acquireLock(nodeRedisClient(client), key, token, 30_000);
 * ```
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
  };
  adapters.set(client, adapter);
  return adapter;
}

/**
 * Closes a node-redis client the library made by a factory: `close()` (waits for replies under
 * way), and `destroy()` when it does not finish within `timeoutMs`. Never rejects.
 *
 * @example
 * ```ts
 * await closeNodeRedis(client, 1000);
 * ```
 */
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
