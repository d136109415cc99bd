import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { fmt, fmtInt, summarize, table, target, type BenchSection } from './harness.js';

/**
 * Idempotent POSTs retried under load: clients send each order, then retry it as a client that
 * timed out does (a few times, 0–2 build times apart), to either of 2 worker processes. Without
 * `@Idempotent` every retry places the order again; with it, none does.
 */

const WORKERS = 2;
const FULL = { keys: 400, retries: 4, concurrency: 32, buildMs: 50 };
const QUICK = { keys: 20, retries: 2, concurrency: 8, buildMs: 20 };

const ROUTES = [
  { label: 'no @Idempotent', path: 'plain' },
  { label: '@Idempotent() (409 while it runs)', path: 'throw' },
  { label: "@Idempotent({ onBusy: 'wait' })", path: 'wait' },
] as const;

interface Server {
  readonly process: ChildProcess;
  readonly url: string;
}

async function startServer(port: number, buildMs: number): Promise<Server> {
  const child = fork(fileURLToPath(new URL('./idempotency.server.js', import.meta.url)), [], {
    env: { ...process.env, BENCH_REDIS_PORT: String(port), BENCH_BUILD_MS: String(buildMs) },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const [message] = (await once(child, 'message')) as [{ port: number }];
  return { process: child, url: `http://127.0.0.1:${message.port}` };
}

interface Sent {
  readonly status: number;
  readonly replayed: boolean;
  readonly ms: number;
}

async function send(url: string, path: string, key: string): Promise<Sent> {
  const started = performance.now();
  const response = await fetch(`${url}/${path}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ item: key }),
  });
  await response.arrayBuffer();
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed') === 'true',
    ms: performance.now() - started,
  };
}

export const idempotencySection: BenchSection = {
  id: 'idempotency',
  title: '13. Idempotent POSTs retried under load',
  async run({ quick, redis, report }) {
    const shape = quick ? QUICK : FULL;
    const servers = await Promise.all(
      Array.from({ length: WORKERS }, () => startServer(redis.port, shape.buildMs)),
    );
    const rows: string[][] = [];
    try {
      for (const route of ROUTES) {
        const run = `${route.path}-${Date.now()}`;
        const sent: Sent[] = [];
        let next = 0;
        // One client per key: the order, then its retries, each to a worker of its own choosing.
        const client = async (): Promise<void> => {
          for (let k = next++; k < shape.keys; k = next++) {
            const key = `${run}-${k}`;
            const attempts: Promise<Sent>[] = [];
            for (let a = 0; a <= shape.retries; a++) {
              const server = servers[(k + a) % WORKERS]!;
              attempts.push(send(server.url, route.path, key));
              await new Promise((resolve) =>
                setTimeout(resolve, Math.random() * 2 * shape.buildMs),
              );
            }
            sent.push(...(await Promise.all(attempts)));
          }
        };
        const started = performance.now();
        await Promise.all(Array.from({ length: shape.concurrency }, client));
        const seconds = (performance.now() - started) / 1000;
        const counts = await Promise.all(
          servers.map(
            async (s) => (await (await fetch(`${s.url}/runs`)).json()) as Record<string, number>,
          ),
        );
        let placed = 0;
        for (const byKey of counts) {
          for (const [key, n] of Object.entries(byKey))
            if (key.startsWith(`${route.path}:${run}-`)) placed += n;
        }
        const duplicates = placed - shape.keys;
        const latency = summarize(sent.map((s) => s.ms));
        const ok = sent.filter((s) => s.status === 201);
        rows.push([
          route.label,
          fmtInt(sent.length),
          fmtInt(placed),
          fmtInt(duplicates),
          fmtInt(ok.filter((s) => s.replayed).length),
          fmtInt(sent.filter((s) => s.status === 409).length),
          fmtInt(sent.filter((s) => s.status !== 201 && s.status !== 409).length),
          fmt(latency.p50),
          fmt(latency.p99),
          fmt(sent.length / seconds, 0),
        ]);
        if (route.path !== 'plain') {
          target(`${route.label}: duplicate orders placed`, fmtInt(duplicates), duplicates === 0);
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
      `${WORKERS} worker processes (Express) on one redis-server; ${shape.keys} orders, each sent ` +
        `once and retried ${shape.retries} times, 0–${2 * shape.buildMs} ms apart, to alternating ` +
        `workers, by ${shape.concurrency} clients at once; placing an order takes ${shape.buildMs} ms. ` +
        `"placed": handler runs across both workers; latency in ms over every request.\n`,
    );
    report.add(
      table(
        [
          'route',
          'requests',
          'placed',
          'duplicates',
          'replayed',
          '409',
          'other',
          'p50',
          'p99',
          'req/s',
        ],
        rows,
      ),
    );
  },
};
