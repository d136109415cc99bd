import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis, type ClusterOptions } from 'ioredis';
import { freePort, startRedis, type RedisServer } from './redis-server.js';

/**
 * A throwaway Redis Cluster of three masters (by default without replicas) on free loopback ports,
 * owned by one test file. Every node is a real redis-server with `cluster-enabled yes`; the slots
 * are assigned by `redis-cli --cluster create`.
 */
export interface RedisCluster {
  /** The masters at start (0 to 2), then their replicas, if any. */
  readonly nodes: readonly RedisServer[];
  /** A new ioredis `Cluster` client for this cluster; closed by `stop()`. */
  client(options?: ClusterOptions): Cluster;
  /** A plain client on the node at `index`, e.g. for CLUSTER KEYSLOT or INFO. */
  node(index: number): Redis;
  /** The index in `nodes` of the replica of the master at `index` (asked of that master). */
  replicaOf(index: number): Promise<number>;
  /** Stops every node and every client made by `client()`. */
  stop(): Promise<void>;
}

const MASTERS = 3;

/** How {@link startRedisCluster} builds the cluster. */
export interface RedisClusterOptions {
  /** Replicas per master: 0 (default) or 1. */
  readonly replicas?: 0 | 1;
  /** `cluster-node-timeout`, ms: how long a node may not answer before it is failed. Default 5000. */
  readonly nodeTimeoutMs?: number;
}

async function clusterState(node: Redis): Promise<string | undefined> {
  const info = await node.cluster('INFO');
  return /cluster_state:(\w+)/.exec(String(info))?.[1];
}

/** Waits until every node says `cluster_state:ok` and knows all 16384 slots. */
async function waitForClusterOk(nodes: readonly Redis[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const states = await Promise.all(nodes.map((n) => clusterState(n).catch(() => undefined)));
    if (states.every((s) => s === 'ok')) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the Redis Cluster did not reach cluster_state:ok within 20 s');
}

/** Whether the replica `node` says `master_link_status:up`. */
const synced = async (node: Redis): Promise<boolean> =>
  /master_link_status:up/.test(String(await node.info('replication')));

/** Waits until every replica is in sync, so that it may fail over. */
async function waitForReplicas(replicas: readonly Redis[]): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    const states = await Promise.all(replicas.map((n) => synced(n).catch(() => false)));
    if (states.every(Boolean)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('the Redis Cluster replicas did not sync within 20 s');
}

/**
 * Starts three cluster-enabled redis-servers, and with `replicas: 1` three more (each with its own
 * `cluster-port` and nodes file in a temporary directory), joins them with
 * `redis-cli --cluster create ... --cluster-replicas <n> --cluster-yes`, and waits until the
 * cluster is ok and every replica is in sync.
 */
export async function startRedisCluster(shape: RedisClusterOptions = {}): Promise<RedisCluster> {
  const replicas = shape.replicas ?? 0;
  const dir = mkdtempSync(join(tmpdir(), 'buffer-lock-cluster-'));
  const nodes: RedisServer[] = [];
  const clients: Cluster[] = [];
  const plain: Redis[] = [];
  const stop = async (): Promise<void> => {
    for (const client of clients) client.disconnect();
    await Promise.all(nodes.map((n) => n.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (let i = 0; i < MASTERS * (1 + replicas); i++) {
      const busPort = await freePort();
      nodes.push(
        await startRedis([
          '--cluster-enabled',
          'yes',
          '--cluster-port',
          String(busPort),
          '--cluster-config-file',
          join(dir, `nodes-${i}-${busPort}.conf`),
          '--cluster-node-timeout',
          String(shape.nodeTimeoutMs ?? 5000),
          '--dir',
          dir,
        ]),
      );
    }
    const create = spawnSync(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        String(replicas),
        '--cluster-yes',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (create.status !== 0) {
      throw new Error(`redis-cli --cluster create failed: ${create.stdout}${create.stderr}`);
    }
    for (const n of nodes) plain.push(n.client());
    await waitForClusterOk(plain);
    await waitForReplicas(plain.slice(MASTERS));
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    nodes,
    client(options = {}) {
      const client = new Cluster(
        nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
        options,
      );
      client.on('error', () => {});
      clients.push(client);
      return client;
    },
    node: (index) => plain[index]!,
    async replicaOf(index) {
      const id = String(await plain[index]!.cluster('MYID'));
      const lines = String(await plain[index]!.cluster('NODES')).split('\n');
      // <id> <ip:port@cport> <flags> <master id> ...
      const line = lines.find((l) => l.split(' ')[3] === id && /slave/.test(l.split(' ')[2] ?? ''));
      const port = Number(/:(\d+)@/.exec(line ?? '')?.[1]);
      const found = nodes.findIndex((n) => n.port === port);
      if (found < 0) throw new Error(`the master at index ${index} has no replica`);
      return found;
    },
    stop,
  };
}
