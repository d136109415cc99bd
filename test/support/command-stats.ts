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

/** Script calls (EVAL and EVALSHA) a server has run, from INFO commandstats. */
export async function scriptCalls(client: Redis): Promise<number> {
  const stats = await commandStats(client);
  return (stats.get('eval') ?? 0) + (stats.get('evalsha') ?? 0);
}
