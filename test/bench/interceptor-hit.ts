// Section 6's HTTP hit: instructions per request of BufferCacheInterceptor serving one URL's
// entry (interceptor-hit.server.ts), this build and the `--baseline` build side by side, each in
// an app process of its own under callgrind, their rounds interleaved.
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Baseline } from './baseline.js';
import { countInstructions, spawnUnderCallgrind } from './callgrind.js';

const SERVER = fileURLToPath(new URL('./interceptor-hit.server.js', import.meta.url));

/** Requests per round, uncounted rounds first, counted rounds, connections. */
export const INTERCEPTOR_LOAD = { requests: 2_000, warmRounds: 3, rounds: 5, connections: 16 };

/** Instructions per request, one per counted round, for this build and (if given) the baseline. */
export interface InterceptorCounts {
  readonly ours: number[];
  readonly baseline: number[] | undefined;
}

export async function interceptorInstructions(
  redisPort: number,
  baseline: Baseline | undefined,
): Promise<InterceptorCounts> {
  const builds = [undefined, ...(baseline ? [baseline.entry] : [])];
  const servers = builds.map((entry) =>
    spawnUnderCallgrind(SERVER, [], {
      env: {
        ...process.env,
        BENCH_REDIS_PORT: String(redisPort),
        ...(entry ? { BENCH_LIB_ENTRY: entry } : {}),
      },
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    }),
  );
  try {
    const ports = await Promise.all(
      servers.map(
        (server) =>
          new Promise<number>((resolve, reject) => {
            server.once('message', (message: { port: number }) => resolve(message.port));
            server.once('exit', (code) => reject(new Error(`interceptor app exited ${code}`)));
          }),
      ),
    );
    const { requests, warmRounds, rounds, connections } = INTERCEPTOR_LOAD;
    const load = async (port: number): Promise<number> => {
      const result = await autocannon({
        url: `http://127.0.0.1:${port}/item/1`,
        connections,
        amount: requests,
        timeout: 120,
      });
      if (result.non2xx > 0 || result.errors > 0) {
        throw new Error(
          `interceptor hit: ${result.non2xx} non-2xx answers, ${result.errors} errors`,
        );
      }
      return result['2xx'];
    };
    for (let i = 0; i < warmRounds; i++) for (const port of ports) await load(port);
    const counts = builds.map((): number[] => []);
    for (let round = 0; round < rounds; round++) {
      // Which build goes first alternates every round.
      for (let j = 0; j < servers.length; j++) {
        const i = (j + round) % servers.length;
        let answered = 0;
        const instructions = await countInstructions(servers[i]!.pid!, async () => {
          answered = await load(ports[i]!);
        });
        counts[i]!.push(instructions / answered);
      }
    }
    return { ours: counts[0]!, baseline: baseline ? counts[1] : undefined };
  } finally {
    for (const server of servers) server.kill();
  }
}
