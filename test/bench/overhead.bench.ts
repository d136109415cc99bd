import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { Redis } from 'ioredis';
import {
  commandDelta,
  commandStats,
  fmt,
  fmtInt,
  fmtRatio,
  interleave,
  median,
  NOT_AVAILABLE,
  table,
  target,
  type BenchContext,
  type BenchSection,
} from './harness.js';

const CONNECTIONS = 16;

type ServerMessage = { type: 'listening'; port: number } | { type: 'unavailable' };

interface Load {
  readonly rps: number;
  readonly p50: number;
  readonly p99: number;
  readonly non2xx: number;
  readonly errors: number;
  readonly commandsPerRequest: number;
}

/** autocannon on `route`, every request a new id (so @SingleFlight takes a new, free key). */
async function load(port: number, route: string, seconds: number, admin: Redis): Promise<Load> {
  let id = 0;
  const before = await commandStats(admin);
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: CONNECTIONS,
    duration: seconds,
    requests: [
      { method: 'GET', setupRequest: (request) => ({ ...request, path: `/${route}/${id++}` }) },
    ],
  });
  const commands = commandDelta(before, await commandStats(admin)).total;
  return {
    commandsPerRequest: commands / Math.max(1, result['2xx'] + result.non2xx),
    rps: result['2xx'] / result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

export const overheadSection: BenchSection = {
  id: 'overhead',
  title: '3. Decorator overhead',
  async run({ quick, redis, report }: BenchContext) {
    const server = fork(fileURLToPath(new URL('./overhead.server.js', import.meta.url)), [], {
      env: { ...process.env, BENCH_REDIS_PORT: String(redis.port) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const exited = new Promise((r) => server.once('exit', r));
    const admin = redis.client();
    try {
      const message = await new Promise<ServerMessage>((resolve, reject) => {
        server.once('message', resolve);
        server.once('exit', (code) => reject(new Error(`overhead server exited with ${code}`)));
      });
      if (message.type === 'unavailable') {
        report.add(
          `## 3. Decorator overhead\n\n${NOT_AVAILABLE}: the library exports no @SingleFlight.\n`,
        );
        target('decorator overhead: throughput ≥ 0.9× bare', NOT_AVAILABLE, undefined);
        return;
      }
      const rounds = quick ? 1 : 5;
      const seconds = quick ? 1 : 5;
      const routes = ['bare', 'single-flight'] as const;
      const results = new Map<string, Load[]>(routes.map((r) => [r, []]));
      await interleave(
        routes,
        rounds,
        1,
        (route, round) => {
          report.progress(`overhead: ${route}, round ${round}`);
          return load(message.port, route, round < 0 ? 1 : seconds, admin);
        },
        (route, result) => results.get(route)!.push(result),
      );
      const bare = results.get('bare')!;
      const sf = results.get('single-flight')!;
      const ratio = median(sf.map((r, i) => r.rps / bare[i]!.rps));
      const p99Diff = median(sf.map((r) => r.p99)) - median(bare.map((r) => r.p99));
      const row = (name: string, loads: Load[]): string[] => [
        name,
        fmtInt(median(loads.map((l) => l.rps))),
        fmt(median(loads.map((l) => l.p50)), 2),
        fmt(median(loads.map((l) => l.p99)), 2),
        fmt(median(loads.map((l) => l.commandsPerRequest)), 2),
        String(loads.reduce((n, l) => n + l.non2xx + l.errors, 0)),
      ];
      report.add(
        `## 3. Decorator overhead\n\n` +
          `One Nest (Express) app in its own process with two routes whose handlers return ` +
          `\`{ id }\`: \`/bare/:id\` and \`/single-flight/:id\` under ` +
          `\`@SingleFlight((id) => \\\`item:\${id}\\\`)\`. Every request has a new id, so every ` +
          `call takes and releases a free lock (two Redis round trips). autocannon, ` +
          `${CONNECTIONS} connections, ${rounds} round(s) of ${seconds} s per route, interleaved.\n\n` +
          table(
            ['route', 'requests/s', 'p50 ms', 'p99 ms', 'Redis cmds/request', 'errors + non-2xx'],
            [row('bare', bare), row('@SingleFlight', sf)],
          ) +
          `\nThroughput ratio (median of per-round ratios): **${fmtRatio(ratio)}**; ` +
          `p99 difference: **${fmt(p99Diff, 2)} ms**.\n`,
      );
      target('decorator overhead: throughput ≥ 0.9× bare', fmtRatio(ratio), ratio >= 0.9);
    } finally {
      admin.disconnect();
      if (server.connected) server.send('exit');
      const timer = setTimeout(() => server.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
  },
};
