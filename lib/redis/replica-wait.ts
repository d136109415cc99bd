import type { RedisScriptClient, WriterConnection } from '../types/clients.js';
import { fieldOf, isIoredisClient } from './client.js';

/** Ms a writer connection stays open after its last write. */
const IDLE_MS = 5000;

// What is called on an ioredis `Redis` or `Cluster` (or iovalkey's) to write and wait.
interface IoredisLike extends RedisScriptClient {
  readonly isCluster: boolean;
  readonly slots?: readonly (readonly string[] | undefined)[];
  readonly stream?: { unref?: () => void };
  readonly options: { readonly host?: string; readonly port?: number };
  call(...args: (string | number)[]): Promise<unknown>;
  duplicate(...args: unknown[]): IoredisLike;
  connect(): Promise<unknown>;
  nodes?(role: 'master'): readonly IoredisLike[];
  on(event: string, listener: (...args: never[]) => void): unknown;
  disconnect(): void;
}

// A socket that never keeps the process alive: the writer closes when idle, but not at exit.
const unrefOnReady = (connection: IoredisLike): void => {
  connection.on('ready', () => connection.stream?.unref?.());
};

/** The master connection of `cluster` that serves `key`: where a write of the key went. */
async function masterOf(cluster: IoredisLike, key: string): Promise<IoredisLike> {
  const slot = Number(await cluster.call('CLUSTER', 'KEYSLOT', key));
  const owner = cluster.slots?.[slot]?.[0];
  const node = cluster
    .nodes?.('master')
    .find((n) => `${n.options.host}:${n.options.port}` === owner);
  if (!node) throw new Error(`no master is known for slot ${slot}`);
  return node;
}

// Connected before its first write: a client without an offline queue refuses one sent earlier.
async function ioredisWriter(client: IoredisLike): Promise<WriterConnection> {
  const lazy = { lazyConnect: true };
  const made = client.isCluster ? client.duplicate([], lazy) : client.duplicate(lazy);
  // Its failures reach the writes as rejections.
  made.on('error', () => {});
  if (made.isCluster) made.on('+node', (node: IoredisLike) => unrefOnReady(node));
  else unrefOnReady(made);
  try {
    await made.connect();
  } catch (error) {
    made.disconnect();
    throw error;
  }
  return {
    client: made,
    replicas: async (key, wanted, timeoutMs) => {
      const node = made.isCluster ? await masterOf(made, key) : made;
      return node.call('WAIT', wanted, timeoutMs);
    },
    close: () => made.disconnect(),
  };
}

/** A connection of its own beside `client`'s; `undefined` for a client that cannot make one. */
async function writerConnection(client: RedisScriptClient): Promise<WriterConnection | undefined> {
  const own = fieldOf(client, 'writer');
  if (typeof own === 'function') return (await own.call(client)) as WriterConnection;
  return isIoredisClient(client) ? ioredisWriter(client as IoredisLike) : undefined;
}

/** What a write that waited for replicas gives: how many have it, or why none could be asked. */
export type Replicated = { readonly acked: number } | { readonly unsupported: true };

/**
 * Writes whose caller waits until `wanted` replicas have them (Redis `WAIT`), on one connection
 * per client of their own: `WAIT` holds the connection it is sent on, so it never holds the
 * lock's. The connection is made on the first write (ioredis, iovalkey or node-redis, standalone
 * or Cluster), closed 5 s after the last, and never keeps the process alive.
 */
export class ReplicaWriter {
  private connection: Promise<WriterConnection | undefined> | undefined;
  private writing = 0;
  private idle: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly client: RedisScriptClient) {}

  /** Runs `write` on the writer's connection, then asks how many replicas have it. */
  async write(
    key: string,
    write: (client: RedisScriptClient) => Promise<unknown>,
    wanted: number,
    timeoutMs: number,
  ): Promise<Replicated> {
    this.writing++;
    clearTimeout(this.idle);
    try {
      const connection = await this.open();
      if (!connection) return { unsupported: true };
      await write(connection.client);
      return { acked: Number(await connection.replicas(key, wanted, timeoutMs)) };
    } finally {
      if (--this.writing === 0) this.idle = setTimeout(() => this.close(), IDLE_MS).unref();
    }
  }

  /** Closes the connection now; the next write opens another. */
  close(): void {
    const connection = this.connection;
    this.connection = undefined;
    opened.delete(this);
    void connection?.then((c) => c?.close()).catch(() => {});
  }

  private open(): Promise<WriterConnection | undefined> {
    if (!this.connection) {
      opened.add(this);
      const opening = writerConnection(this.client);
      // A connection that could not be made is tried again by the next write.
      opening.catch(() => {
        if (this.connection === opening) this.connection = undefined;
      });
      this.connection = opening;
    }
    return this.connection;
  }
}

const writers = new WeakMap<object, ReplicaWriter>();
const opened = new Set<ReplicaWriter>();

/** Closes every writer connection of this process, as the app shuts down. */
export function closeReplicaWriters(): void {
  for (const writer of opened) writer.close();
}

/** The one replica writer of `client` in this process. */
export function replicaWriterFor(client: RedisScriptClient): ReplicaWriter {
  let writer = writers.get(client);
  if (!writer) writers.set(client, (writer = new ReplicaWriter(client)));
  return writer;
}
