import type { Redis } from 'ioredis';

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
