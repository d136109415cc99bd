// The Redis clients the lock is specified against, one entry per family, so that a behaviour suite
// runs unchanged over each: `describe.each(LOCK_FAMILIES)('… (%s)', (family) => …)`. The in-memory
// backend is one more family (BACKENDS), whose keys a suite reads through `inspectorFor`.
import { Cluster, Redis } from 'ioredis';
import { Redis as Valkey } from 'iovalkey';
import { createClient, createCluster } from 'redis';
import { createClient as createClient5, createCluster as createCluster5 } from 'redis5';
import type { RedisScriptClient } from '../../lib/index.js';
import { vi } from 'vitest';
import { MemoryClient, memoryClient } from '../../lib/memory/memory-client.js';
import type { LockClient } from '../../lib/redis/client.js';
import { commandStats } from './command-stats.js';
import type { RedisServer } from './redis-server.js';

/** Where a family connects to: one redis-server (a `RedisServer` fits). */
export interface RedisTarget {
  readonly port: number;
}

/** Where a cluster family connects to: the nodes of a Redis Cluster (a `RedisCluster` fits). */
export interface ClusterTarget {
  readonly nodes: readonly RedisTarget[];
}

/**
 * One family of clients: how to make a client of it that the library is given as `redis`. A family
 * that is not a real Redis may ignore the target. Every client a family made is closed by its
 * `closeAll()` (call it in `afterAll`, before the server stops).
 *
 * @example
 * ```ts
 * describe.each(LOCK_FAMILIES)('acquire ($name)', (family) => {
 *   afterAll(() => family.closeAll());
 *   it('takes a free key', async () => {
 *     const lock = new RedisLockService({ redis: await family.connect(server) });
 *     expect((await lock.acquire('k'))[0]).toBeDefined();
 *   });
 * });
 * ```
 */
export interface ClientFamily<Target = RedisTarget> {
  /** Shown in test titles, and the value of {@link FAMILY_ENV} that selects it in a worker. */
  readonly name: string;
  /** Whether a worker process can build it from {@link FAMILY_ENV} and a port. */
  readonly multiProcess: boolean;
  /** Whether its clients can subscribe (`duplicate()` and sharded pub/sub): releases wake waiters. */
  readonly wakes: boolean;
  /** A new client, connected and ready for commands. */
  connect(target: Target): Promise<LockClient>;
  /** Closes every client this family made so far. */
  closeAll(): Promise<void>;
}

/** The environment variable naming the family a worker process builds its client from. */
export const FAMILY_ENV = 'BUFFER_LOCK_CLIENT_FAMILY';

/** A family whose clients are closed by `close`; `make` gives a connected client. */
function family<Target, Client extends LockClient>(
  name: string,
  flags: { multiProcess: boolean; wakes: boolean },
  make: (target: Target) => Promise<Client>,
  close: (client: Client) => unknown,
): ClientFamily<Target> {
  const made: Client[] = [];
  return {
    name,
    ...flags,
    async connect(target) {
      const client = await make(target);
      made.push(client);
      return client;
    },
    async closeAll() {
      const clients = made.splice(0);
      await Promise.all(clients.map(async (client) => close(client)));
    },
  };
}

/** Errors reach callers as rejected commands; without a listener an emitter throws them. */
const quiet = <T extends { on(event: 'error', listener: () => void): unknown }>(client: T): T => {
  client.on('error', () => {});
  return client;
};

const ioredis = async (target: RedisTarget): Promise<Redis> => {
  const client = quiet(new Redis({ host: '127.0.0.1', port: target.port, lazyConnect: true }));
  await client.connect();
  return client;
};

const nodeRedisUrl = (target: RedisTarget): string => `redis://127.0.0.1:${target.port}`;

/** Closes a node-redis client or cluster whatever its state (v5 and v6 name it `destroy`). */
const destroy = (client: { isOpen: boolean; destroy(): unknown }): void => {
  if (client.isOpen) client.destroy();
};

/** ioredis `Redis`, as most users pass it. */
export const IOREDIS: ClientFamily = family(
  'ioredis',
  { multiProcess: true, wakes: true },
  ioredis,
  (client) => client.disconnect(),
);

/** node-redis 6 (`createClient()` of `redis`). */
export const NODE_REDIS: ClientFamily = family(
  'node-redis 6',
  { multiProcess: true, wakes: true },
  async (target: RedisTarget) => {
    const client = quiet(createClient({ url: nodeRedisUrl(target) }));
    await client.connect();
    return client;
  },
  destroy,
);

/** node-redis 5 (`createClient()` of `redis@5`). */
export const NODE_REDIS_5: ClientFamily = family(
  'node-redis 5',
  { multiProcess: true, wakes: true },
  async (target: RedisTarget) => {
    const client = quiet(createClient5({ url: nodeRedisUrl(target) }));
    await client.connect();
    return client;
  },
  destroy,
);

/** iovalkey `Redis`, the ioredis fork of the Valkey project. */
export const IOVALKEY: ClientFamily = family(
  'iovalkey',
  { multiProcess: true, wakes: true },
  async (target: RedisTarget) => {
    const client = quiet(new Valkey({ host: '127.0.0.1', port: target.port, lazyConnect: true }));
    await client.connect();
    return client;
  },
  (client) => client.disconnect(),
);

/** The minimal interface: an object with `eval()` only (no EVALSHA, no SET, no pub/sub). */
export const EVAL_ONLY: ClientFamily = family(
  'eval() only',
  { multiProcess: true, wakes: false },
  async (target: RedisTarget) => {
    const real = await ioredis(target);
    const client: RedisScriptClient & { real: Redis } = {
      real,
      eval: (script, numkeys, ...args) => real.eval(script, numkeys, ...args),
    };
    return client;
  },
  (client) => client.real.disconnect(),
);

/** Every family of single-server clients the lock supports. */
export const LOCK_FAMILIES: readonly ClientFamily[] = [
  IOREDIS,
  NODE_REDIS,
  NODE_REDIS_5,
  IOVALKEY,
  EVAL_ONLY,
];

/** The family named `name` (what {@link FAMILY_ENV} holds in a worker); throws for an unknown one. */
export function lockFamily(name: string | undefined): ClientFamily {
  const found = LOCK_FAMILIES.find((candidate) => candidate.name === (name ?? IOREDIS.name));
  if (!found) throw new Error(`no client family is named ${JSON.stringify(name)}`);
  return found;
}

const rootNodes = (target: ClusterTarget): { url: string }[] =>
  target.nodes.map((node) => ({ url: nodeRedisUrl(node) }));

/** ioredis `Cluster`. */
export const IOREDIS_CLUSTER: ClientFamily<ClusterTarget> = family(
  'ioredis Cluster',
  { multiProcess: false, wakes: true },
  async (target: ClusterTarget) => {
    const client = quiet(
      new Cluster(
        target.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
        { lazyConnect: true },
      ),
    );
    await client.connect();
    return client;
  },
  (client) => client.disconnect(),
);

/** node-redis 6 `createCluster()`. */
export const NODE_REDIS_CLUSTER: ClientFamily<ClusterTarget> = family(
  'node-redis 6 cluster',
  { multiProcess: false, wakes: true },
  async (target: ClusterTarget) => {
    const client = quiet(createCluster({ rootNodes: rootNodes(target) }));
    await client.connect();
    return client;
  },
  destroy,
);

/** node-redis 5 `createCluster()`. */
export const NODE_REDIS_5_CLUSTER: ClientFamily<ClusterTarget> = family(
  'node-redis 5 cluster',
  { multiProcess: false, wakes: true },
  async (target: ClusterTarget) => {
    const client = quiet(createCluster5({ rootNodes: rootNodes(target) }));
    await client.connect();
    return client;
  },
  destroy,
);

/** Every family of Redis Cluster clients the lock supports. */
export const CLUSTER_FAMILIES: readonly ClientFamily<ClusterTarget>[] = [
  IOREDIS_CLUSTER,
  NODE_REDIS_CLUSTER,
  NODE_REDIS_5_CLUSTER,
];

/**
 * The in-memory backend (`memory://`): no Redis. Clients made for one target share one keyspace
 * (`memory://families-PORT`), as clients of one server share its keys, so a suite's workers contend
 * as they do on Redis. One process only: no worker process can reach it.
 */
export const MEMORY: ClientFamily = family(
  'memory://',
  { multiProcess: false, wakes: true },
  async (target: RedisTarget) => memoryClient(`memory://families-${target.port}`),
  (client) => client.disconnect(),
);

/** Every single-server family and the in-memory backend: what the lock's behaviour suites run over. */
export const BACKENDS: readonly ClientFamily[] = [...LOCK_FAMILIES, MEMORY];

/**
 * What a suite reads and writes behind the lock's back, as an admin connection to Redis would:
 * GET, PTTL, EXISTS, DBSIZE, DEL and SET … PX.
 */
export interface KeyInspector {
  get(key: string): Promise<string | null>;
  pttl(key: string): Promise<number>;
  exists(key: string): Promise<number>;
  dbsize(): Promise<number>;
  del(key: string): Promise<number>;
  set(key: string, value: string): Promise<unknown>;
  set(key: string, value: string, px: 'PX', milliseconds: number): Promise<unknown>;
}

/**
 * The keys the clients of family `of` on `server` see: an ioredis admin connection to the server (closed
 * by `server.stop()`), or for the in-memory backend a client of the keyspace its clients share.
 */
export function inspectorFor(of: ClientFamily, server: RedisServer): KeyInspector {
  if (of === MEMORY) return memoryClient(`memory://families-${server.port}`);
  return server.client();
}

const LOCK_COMMANDS = ['eval', 'evalsha', 'set'] as const;

/**
 * Starts counting the lock commands (`eval`, `evalsha`, `set`) that the clients of family `of` send, and
 * gives a function that answers the names of those sent since: from Redis's command statistics
 * (reset now through `admin`), or from the in-memory clients' own calls.
 */
export async function lockCommandsFrom(
  of: ClientFamily,
  admin: Redis,
): Promise<() => Promise<string[]>> {
  if (of === MEMORY) {
    const spies = LOCK_COMMANDS.map(
      (name) => [name, vi.spyOn(MemoryClient.prototype, name)] as const,
    );
    return async () => {
      const sent = spies.filter(([, spy]) => spy.mock.calls.length > 0).map(([name]) => name);
      for (const [, spy] of spies) spy.mockRestore();
      return sent;
    };
  }
  await admin.config('RESETSTAT');
  return async () =>
    [...(await commandStats(admin)).keys()].filter((name) =>
      (LOCK_COMMANDS as readonly string[]).includes(name),
    );
}
