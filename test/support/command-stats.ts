import type { Redis } from 'ioredis';
import { monitor, type MonitoredCommand } from './monitor.js';
import type { RedisServer } from './redis-server.js';

/** Calls of each command a server ran since start (or CONFIG RESETSTAT), by lower-case name. */
export async function commandStats(client: Redis): Promise<Map<string, number>> {
  const info = String(await client.info('commandstats'));
  const stats = new Map<string, number>();
  for (const [, name, calls] of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    stats.set(name!, Number(calls));
  }
  return stats;
}

/**
 * Lock commands a server has run, from INFO commandstats: SET (an acquire) and EVAL/EVALSHA (a
 * release or an extension). A SET run inside a script counts too, so this counts lock commands
 * only where no script writes with SET (no `share`, no `fencing`).
 */
export async function lockCommands(client: Redis): Promise<number> {
  const stats = await commandStats(client);
  return (stats.get('set') ?? 0) + (stats.get('eval') ?? 0) + (stats.get('evalsha') ?? 0);
}

/**
 * Watches (MONITOR) the lock commands `node` runs on `redisKey` and counts the acquires that
 * reached it after the release of their own token. The lock sends that release right behind an
 * acquire that failed on the client (a timeout): an acquire that arrives later still, and finds
 * the key free, takes the lock with a token nobody holds, for a whole ttl. Resolves, once
 * MONITOR is on, to a function that tells the count so far.
 */
export async function lateAcquires(node: Redis, redisKey: string): Promise<() => number> {
  const released = new Set<string>();
  let late = 0;
  await monitor(node, ({ args }) => {
    const [name, ...rest] = args;
    const command = name?.toLowerCase();
    // A release: EVALSHA <sha> 1 <key> <token> (or EVAL <script> ...); an acquire: SET <key> <token> PX <ms> NX.
    if ((command === 'evalsha' || command === 'eval') && rest.length === 4 && rest[1] === '1') {
      if (rest[2] === redisKey) released.add(rest[3]!);
    } else if (command === 'set' && rest[0] === redisKey && released.has(rest[1]!)) {
      late++;
    }
  });
  return () => late;
}

/** The address MONITOR names `client` by. */
export const addressOf = (client: Redis): string =>
  `${client.stream.localAddress}:${client.stream.localPort}`;

/** What MONITOR saw on `server` while `during` ran: each command with the address it came from. */
export async function watched(
  server: RedisServer,
  during: () => Promise<void>,
): Promise<MonitoredCommand[]> {
  const seen: MonitoredCommand[] = [];
  const stop = await monitor(server.client(), (command) => void seen.push(command));
  try {
    await during();
    // MONITOR shows a command once it ran: a PING behind the others is shown after them.
    await server.client().ping();
    await new Promise((r) => setTimeout(r, 50));
  } finally {
    stop();
  }
  return seen;
}

// What `watched`'s own connections send (their ready check, the closing PING), not the client's.
const WATCHER_COMMANDS = new Set(['hello', 'ping', 'info', 'monitor', 'client']);

/**
 * The commands clients sent to `server` while `during` ran, by lower-case name, in order: not
 * those a script ran, nor the watcher's own.
 */
export async function sentDuring(
  server: RedisServer,
  during: () => Promise<unknown>,
): Promise<string[]> {
  const seen = await watched(server, async () => void (await during()));
  return seen
    .filter((command) => command.source !== 'lua')
    .map((command) => command.args[0]?.toLowerCase() ?? '')
    .filter((name) => !WATCHER_COMMANDS.has(name));
}
