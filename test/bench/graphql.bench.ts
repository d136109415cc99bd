import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { fmt, fmtInt, summarize, table, target, type BenchSection } from './harness.js';

/**
 * A GraphQL query asked by 100 clients at once, over 2 worker processes (Apollo), for a key
 * nobody asked before and again once it is cached: how often the resolver runs, how many answers
 * failed, and how long the clients wait. CacheInterceptor reads an HTTP request that a resolver
 * call does not have: in a GraphQL context it fails every query.
 */

const WORKERS = 2;
const FULL = { clients: 100, rounds: 5, buildMs: 100 };
const QUICK = { clients: 20, rounds: 1, buildMs: 20 };

const FIELDS = [
  { label: 'no cache', field: 'plain' },
  { label: 'CacheInterceptor (@nestjs/cache-manager)', field: 'managed' },
  { label: 'BufferCacheInterceptor', field: 'buffered' },
] as const;

interface Server {
  readonly process: ChildProcess;
  readonly url: string;
}

async function startServer(port: number, buildMs: number): Promise<Server> {
  const child = fork(fileURLToPath(new URL('./graphql.server.js', import.meta.url)), [], {
    env: { ...process.env, BENCH_REDIS_PORT: String(port), BENCH_BUILD_MS: String(buildMs) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  return { process: child, url: `http://127.0.0.1:${message.port}` };
}

async function ask(url: string, query: string): Promise<{ ms: number; ok: boolean }> {
  const started = performance.now();
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query }),
  });
  const answer = (await response.json()) as { data?: unknown; errors?: unknown };
  // A field's error leaves `data: null` with `errors`: an answer that failed.
  return {
    ms: performance.now() - started,
    ok: answer.errors === undefined && answer.data != null,
  };
}

async function runsOf(servers: readonly Server[], field: string): Promise<number> {
  const counts = await Promise.all(
    servers.map(
      async (s) =>
        ((await (await fetch(`${s.url}/runs`)).json()) as Record<string, number>)[field] ?? 0,
    ),
  );
  return counts.reduce((a, b) => a + b, 0);
}

export const graphqlSection: BenchSection = {
  id: 'graphql',
  title: '14. A GraphQL query, 100 concurrent identical requests',
  async run({ quick, redis, report }) {
    const shape = quick ? QUICK : FULL;
    const servers = await Promise.all(
      Array.from({ length: WORKERS }, () => startServer(redis.port, shape.buildMs)),
    );
    const rows: string[][] = [];
    try {
      for (const { label, field } of FIELDS) {
        for (const phase of ['cold', 'warm'] as const) {
          const latencies: number[] = [];
          let runs = 0;
          let failed = 0;
          for (let round = 0; round < shape.rounds; round++) {
            // A key of this round: cold asks it first; warm asks the cold round's key again.
            const query = `{ ${field}(id: "${field}-${round}") { id title pid } }`;
            const before = await runsOf(servers, field);
            const answers = await Promise.all(
              Array.from({ length: shape.clients }, (_, i) =>
                ask(servers[i % WORKERS]!.url, query),
              ),
            );
            runs += (await runsOf(servers, field)) - before;
            failed += answers.filter((a) => !a.ok).length;
            latencies.push(...answers.map((a) => a.ms));
          }
          const latency = summarize(latencies);
          rows.push([
            label,
            phase,
            fmt(runs / shape.rounds, 1),
            fmtInt(failed),
            fmt(latency.p50),
            fmt(latency.p99),
          ]);
          if (field === 'buffered') {
            const expected = phase === 'cold' ? 1 : 0;
            target(
              `GraphQL, ${shape.clients} identical queries, ${phase}: BufferCacheInterceptor resolver runs per round`,
              fmt(runs / shape.rounds, 1),
              runs / shape.rounds === expected,
            );
          }
        }
      }
    } finally {
      for (const server of servers) {
        server.process.disconnect();
        await once(server.process, 'exit');
      }
    }
    report.add(`## ${this.title}\n`);
    report.add(
      `${WORKERS} worker processes (Apollo on Express) on one redis-server; ${shape.clients} ` +
        `clients send one query at once, half to each worker; the resolver takes ${shape.buildMs} ms. ` +
        `"cold": a key never asked before; "warm": the same query again. ${shape.rounds} rounds of ` +
        `each; resolver runs per round, latency in ms over every request of the rounds.\n`,
    );
    report.add(table(['resolver', 'key', 'runs per round', 'errors', 'p50', 'p99'], rows));
  },
};
