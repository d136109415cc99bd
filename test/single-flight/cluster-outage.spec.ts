import type { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisLockService, SingleFlightEngine } from '../../lib/index.js';
import { currentFlight } from '../../lib/single-flight/flight-context.js';
import { until } from '../support/nest-helpers.js';
import { lockCommands } from '../support/command-stats.js';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster.js';
import { countingClient, silent, sleep } from './support.js';

/**
 * Bounded latency and the circuit breaker on a real 3-master Redis Cluster: the master that owns
 * the lock key's slot is paused (SIGSTOP) while an ioredis `Cluster` client with fail-fast
 * settings is in use. Counts and order, not speed; time limits are generous.
 */

let cluster: RedisCluster;

beforeAll(async () => {
  cluster = await startRedisCluster();
}, 60_000);
afterAll(async () => {
  for (const node of cluster.nodes) node.resume();
  await cluster.stop();
});

/** The index in `cluster.nodes` of the master that owns `redisKey`'s slot, asked of node `via`. */
async function ownerOf(redisKey: string, via = 0): Promise<number> {
  const admin = cluster.node(via);
  const slot = Number(await admin.cluster('KEYSLOT', redisKey));
  const ranges = (await admin.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
  const owner = ranges.find(([from, to]) => slot >= from && slot <= to)!;
  return cluster.nodes.findIndex((node) => node.port === owner[2][1]);
}

/** Waits until every node reports `cluster_state:<state>` (asked of the nodes not paused). */
async function clusterState(state: 'ok' | 'fail', nodes: readonly number[]): Promise<void> {
  const says = async (i: number) =>
    new RegExp(`cluster_state:${state}`).test(String(await cluster.node(i).cluster('INFO')));
  await until(async () => (await Promise.all(nodes.map(says))).every(Boolean), 30_000);
}

/** A Cluster client with fail-fast settings, resolved once ready (there is no offline queue). */
async function failFastCluster(commandTimeout: number): Promise<Cluster> {
  const client = cluster.client({
    enableOfflineQueue: false,
    redisOptions: { commandTimeout, maxRetriesPerRequest: 1, connectTimeout: 2000 },
  });
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  return client;
}

describe('5. bounded latency on a Redis Cluster: the slot owner paused (SIGSTOP), then resumed (SIGCONT)', () => {
  it('calls time out after commandTimeout, the breaker opens and sends nothing, the lock works again after SIGCONT', async () => {
    const commandTimeout = 500;
    const openSeconds = 2;
    const { client, calls } = countingClient(await failFastCluster(commandTimeout));
    const lock = new RedisLockService({ redis: client, namespace: 'outage:' });
    const states: string[] = [];
    const engine = new SingleFlightEngine({
      lock,
      options: { logger: silent, circuitBreaker: { failureThreshold: 3, openSeconds, probes: 1 } },
    });
    engine.on('breaker', (state) => states.push(state));
    const locked = () => engine.run('report', () => currentFlight()!.locked);

    expect(await locked()).toBe(true);
    expect(await locked()).toBe(true); // script loaded on the owner: no NOSCRIPT fallback below
    const index = await ownerOf(lock.redisKey('report'));
    const paused = cluster.nodes[index]!;
    const ownerAdmin = cluster.node(index);
    const served = await lockCommands(ownerAdmin);
    const sent = calls();

    paused.pause();
    const timedOut: number[] = [];
    for (let i = 0; i < 3; i++) {
      const start = Date.now();
      expect(await locked()).toBe(false); // fail-open: ran without the lock
      timedOut.push(Date.now() - start);
    }
    expect(states).toEqual(['open']);
    // About commandTimeout each: generous margin for a small, busy machine.
    expect(timedOut.every((ms) => ms < commandTimeout + 2500)).toBe(true);
    // Each timed-out acquire was followed by a release of its own token.
    expect(calls() - sent).toBe(6);

    for (let i = 0; i < 20; i++) expect(await locked()).toBe(false);
    expect(calls() - sent).toBe(6); // open: not one lock command reached the client

    paused.resume();
    // The stopped server read the 6 commands from its socket after SIGCONT, and nothing else.
    await until(async () => (await lockCommands(ownerAdmin)) - served >= 6);
    await sleep(300);
    expect((await lockCommands(ownerAdmin)) - served).toBe(6);
    // A late acquire took the lock, and its release let go of it: the key is not left blocked.
    expect(await ownerAdmin.exists(lock.redisKey('report'))).toBe(0);

    await sleep(openSeconds * 1000);
    await until(async () => (await locked()) === true, 15_000);
    expect(states).toEqual(['open', 'half-open', 'closed']);
    expect(await locked()).toBe(true);
  }, 60_000);

  it('a master paused longer than cluster-node-timeout: CLUSTERDOWN on every slot, calls still bounded, all keys lock again once the cluster is ok', async () => {
    const commandTimeout = 500;
    const openSeconds = 2;
    const { client, calls } = countingClient(await failFastCluster(commandTimeout));
    const lock = new RedisLockService({ redis: client, namespace: 'down:' });
    const states: string[] = [];
    const engine = new SingleFlightEngine({
      lock,
      options: {
        logger: silent,
        lockTimeout: 1,
        circuitBreaker: { failureThreshold: 3, openSeconds, probes: 1 },
      },
    });
    engine.on('breaker', (state) => states.push(state));
    const locked = (key: string) => engine.run(key, () => currentFlight()!.locked);
    await clusterState('ok', [0, 1, 2]);

    // One cache key per master.
    const keyOf = new Map<number, string>();
    for (let i = 0; keyOf.size < 3; i++) {
      const owner = await ownerOf(lock.redisKey(`k${i}`));
      if (!keyOf.has(owner)) keyOf.set(owner, `k${i}`);
    }
    for (const key of keyOf.values()) expect(await locked(key)).toBe(true);
    const others = [0, 1, 2].filter((i) => i !== 0);
    const healthyKeys = others.map((i) => keyOf.get(i)!);

    cluster.nodes[0]!.pause();
    // Past cluster-node-timeout (5 s) the other masters mark it failed and refuse every slot.
    await clusterState('fail', others);
    const sent = calls();
    const slow: number[] = [];
    for (const key of [...healthyKeys, healthyKeys[0]!]) {
      const start = Date.now();
      expect(await locked(key)).toBe(false); // a key on a healthy master: fail-open too
      slow.push(Date.now() - start);
    }
    expect(states).toEqual(['open']);
    // ioredis retries CLUSTERDOWN (maxRedirections x retryDelayOnClusterDown, 16 x 100 ms) on
    // random nodes, the paused one included, where commandTimeout ends it: bounded either way.
    expect(slow.every((ms) => ms < 1600 + commandTimeout + 2500)).toBe(true);
    const whileDown = calls() - sent;
    for (let i = 0; i < 20; i++) expect(await locked(healthyKeys[i % 2]!)).toBe(false);
    expect(calls() - sent).toBe(whileDown); // open: nothing sent

    cluster.nodes[0]!.resume();
    await clusterState('ok', [0, 1, 2]);
    await sleep(openSeconds * 1000);
    await until(async () => (await locked(healthyKeys[0]!)) === true, 20_000);
    expect(states.slice(0, 3)).toEqual(['open', 'half-open', 'closed']);
    for (const key of keyOf.values()) expect(await locked(key)).toBe(true);
    expect(states.at(-1)).toBe('closed');
  }, 90_000);
});
