import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, startRedis, type RedisServer } from './redis-server.js';

/** A host and port as ioredis's `sentinels` option takes them. */
export interface SentinelAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * A throwaway Redis Sentinel group on free loopback ports, owned by one test file: a master, one
 * replica (`--replicaof`) and three sentinel processes (`redis-server <conf> --sentinel`, each with
 * its own config file in a temporary directory) that monitor the master as `name` with quorum 2.
 */
export interface RedisSentinelGroup {
  /** The master group name the sentinels know (`sentinel monitor <name> ...`). */
  readonly name: string;
  /** The master at start. */
  readonly master: RedisServer;
  /** The replica at start. */
  readonly replica: RedisServer;
  /** The sentinels, as ioredis's `sentinels` option takes them. */
  readonly sentinels: readonly SentinelAddress[];
  /** The master's port as a sentinel names it now (`SENTINEL GET-MASTER-ADDR-BY-NAME`). */
  masterPort(): Promise<number | undefined>;
  /**
   * Waits until every sentinel names a master other than `port`, and that server says
   * `role:master`; resolves to its port.
   */
  failedOverFrom(port: number, withinMs?: number): Promise<number>;
  /** Stops the sentinels, both servers and their clients, and removes the temporary directory. */
  stop(): Promise<void>;
}

/** How a {@link startRedisSentinel} group fails over. */
export interface SentinelTimings {
  /** `sentinel down-after-milliseconds`. Default 1000. */
  readonly downAfterMs?: number;
  /** `sentinel failover-timeout`. Default 3000. */
  readonly failoverTimeoutMs?: number;
}

const SENTINELS = 3;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

const alive = (child: ChildProcess): boolean =>
  child.exitCode === null && child.signalCode === null;

async function killed(child: ChildProcess): Promise<void> {
  if (!alive(child)) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

/** Polls `check` every 50 ms until it holds; throws `what` after `withinMs`. */
async function until(check: () => Promise<boolean>, withinMs: number, what: string) {
  const deadline = Date.now() + withinMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what} within ${withinMs} ms`);
    await sleep(50);
  }
}

/** A plain client that never reconnects by itself, for questions to one process. */
function probe(port: number): Redis {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    commandTimeout: 1000,
    connectTimeout: 1000,
  });
  client.on('error', () => {});
  return client;
}

/**
 * `question` asked on a connection of its own, closed after: a server or sentinel that is not up
 * yet, or that drops its clients (a replica does when it is promoted), is asked afresh each time.
 */
async function askOnce<T>(port: number, question: (client: Redis) => Promise<T>): Promise<T> {
  const client = probe(port);
  try {
    return await question(client);
  } finally {
    client.disconnect();
  }
}

/** Field `name` of an INFO reply. */
const infoField = (info: string, name: string): string | undefined =>
  new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();

/** The flat `[field, value, ...]` arrays of `SENTINEL REPLICAS` / `SENTINELS`, as objects. */
const records = (reply: unknown): Record<string, string>[] =>
  (reply as string[][]).map((flat) => {
    const record: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) record[flat[i]!] = flat[i + 1]!;
    return record;
  });

/**
 * Starts a master, a replica of it, and three sentinels (quorum 2, with short `timings`), and
 * waits until the replica is in sync and every sentinel knows the replica and the two other
 * sentinels, so that a failover can be agreed at once.
 */
export async function startRedisSentinel(
  timings: SentinelTimings = {},
  name = 'm',
): Promise<RedisSentinelGroup> {
  const dir = mkdtempSync(join(tmpdir(), 'buffer-lock-sentinel-'));
  const children: ChildProcess[] = [];
  const servers: RedisServer[] = [];
  const asked: Redis[] = [];
  const sentinels: SentinelAddress[] = [];
  // A test run that ends without afterAll (interrupted) leaves no sentinel behind.
  const onExit = (): void => {
    for (const child of children) child.kill('SIGKILL');
  };
  process.once('exit', onExit);
  const stop = async (): Promise<void> => {
    process.off('exit', onExit);
    for (const client of asked) client.disconnect();
    await Promise.all(children.map(killed));
    await Promise.all(servers.map((server) => server.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  const ask = (port: number): Redis => {
    const client = probe(port);
    asked.push(client);
    return client;
  };
  try {
    const master = await startRedis(['--dir', dir]);
    servers.push(master);
    const replica = await startRedis([
      '--dir',
      dir,
      '--replicaof',
      '127.0.0.1',
      String(master.port),
      '--repl-ping-replica-period',
      '1',
    ]);
    servers.push(replica);
    const replicaAdmin = ask(replica.port);
    await until(
      async () =>
        infoField(String(await replicaAdmin.info('replication')), 'master_link_status') === 'up',
      10_000,
      'the replica did not sync with the master',
    );

    for (let i = 0; i < SENTINELS; i++) {
      for (let attempt = 0; ; attempt++) {
        const port = await freePort();
        const conf = join(dir, `sentinel-${i}-${port}.conf`);
        writeFileSync(
          conf,
          [
            `port ${port}`,
            'bind 127.0.0.1',
            `dir ${dir}`,
            `sentinel monitor ${name} 127.0.0.1 ${master.port} 2`,
            `sentinel down-after-milliseconds ${name} ${timings.downAfterMs ?? 1000}`,
            `sentinel failover-timeout ${name} ${timings.failoverTimeoutMs ?? 3000}`,
            `sentinel parallel-syncs ${name} 1`,
            '',
          ].join('\n'),
        );
        const child = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
        children.push(child);
        try {
          await until(
            async () => alive(child) && (await askOnce(port, (c) => c.ping())) === 'PONG',
            5000,
            `sentinel on port ${port} did not answer`,
          );
          sentinels.push({ host: '127.0.0.1', port });
          break;
        } catch (error) {
          // Most likely a port race: another process took the port first.
          await killed(child);
          if (attempt >= 3) throw error;
        }
      }
    }

    const admins = sentinels.map((s) => ask(s.port));
    await until(
      async () => {
        for (const admin of admins) {
          const known = records(await admin.call('SENTINEL', 'SENTINELS', name));
          const replicas = records(await admin.call('SENTINEL', 'REPLICAS', name));
          const healthy = replicas.filter((r) => !/s_down|disconnected/.test(r['flags'] ?? ''));
          if (known.length !== SENTINELS - 1 || healthy.length !== 1) return false;
        }
        return true;
      },
      20_000,
      'the sentinels did not find each other and the replica',
    );

    const masterPort = async (): Promise<number | undefined> => {
      const reply = (await admins[0]!.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as
        string[] | null;
      return reply ? Number(reply[1]) : undefined;
    };
    return {
      name,
      master,
      replica,
      sentinels,
      masterPort,
      async failedOverFrom(port, withinMs = 20_000) {
        let promoted = 0;
        await until(
          async () => {
            const named = await Promise.all(
              admins.map(async (admin) => {
                const reply = (await admin.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', name)) as
                  string[] | null;
                return reply ? Number(reply[1]) : undefined;
              }),
            );
            const first = named[0];
            if (first === undefined || first === port || named.some((p) => p !== first)) {
              return false;
            }
            if (!servers.some((s) => s.port === first)) return false;
            promoted = first;
            const info = await askOnce(first, (c) => c.info('replication'));
            return infoField(String(info), 'role') === 'master';
          },
          withinMs,
          `the sentinels did not fail over from port ${port}`,
        );
        return promoted;
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
