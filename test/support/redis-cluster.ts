import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster, Redis, type ClusterOptions } from 'ioredis';
import { freePort, startRedis, type RedisServer } from './redis-server.js';

/**
 * A throwaway Redis Cluster of three masters (no replicas) on free loopback ports, owned by one
 * test file. Every node is a real redis-server with `cluster-enabled yes`; the slots are assigned
 * by `redis-cli --cluster create`.
 */
export interface RedisCluster {
  readonly nodes: readonly RedisServer[];
  /** A new ioredis `Cluster` client for this cluster; closed by `stop()`. */
  client(options?: ClusterOptions): Cluster;
  /** A plain client on the node at `index`, e.g. for CLUSTER KEYSLOT or INFO. */
  node(index: number): Redis;
  /** Stops every node and every client made by `client()`. */
  stop(): Promise<void>;
}

const MASTERS = 3;

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

/**
 * Starts three cluster-enabled redis-servers (each with its own `cluster-port` and nodes file in a
 * temporary directory), joins them with `redis-cli --cluster create ... --cluster-yes`, and waits
 * until the cluster is ok.
 */
export async function startRedisCluster(): Promise<RedisCluster> {
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
    for (let i = 0; i < MASTERS; i++) {
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
          '5000',
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
        '0',
        '--cluster-yes',
      ],
      { encoding: 'utf8', timeout: 30_000 },
    );
    if (create.status !== 0) {
      throw new Error(`redis-cli --cluster create failed: ${create.stdout}${create.stderr}`);
    }
    for (const n of nodes) plain.push(n.client());
    await waitForClusterOk(plain);
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
    stop,
  };
}
