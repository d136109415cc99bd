import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import type { HttpCommand, HttpReply } from './http.protocol.js';
import { compileWorkers, Worker } from './flight.workers.js';

/**
 * BufferCacheInterceptor on GraphQL resolvers across the fleet: two worker processes, each a Nest
 * GraphQL app on one redis-server, on Apollo and on Mercurius. A query's field runs once for the
 * whole fleet and is a hit everywhere after; a mutation runs every time; a request with
 * `Authorization` is answered by its own run, never by another user's.
 */

const WORKER = '.build/multi-process/test/multi-process/graphql.worker.js';

type Port = Extract<HttpReply, { port: number }>;

interface Book {
  readonly id: string;
  readonly pid: number;
  readonly run: number;
}

const ask = async (
  url: string,
  query: string,
  headers: Record<string, string> = {},
): Promise<Record<string, Book>> => {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ query }),
  });
  const answer = (await response.json()) as { data?: Record<string, Book>; errors?: unknown };
  if (!answer.data) throw new Error(JSON.stringify(answer.errors));
  return answer.data;
};

let server: RedisServer;
beforeAll(async () => {
  compileWorkers();
  server = await startRedis();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe.each(['apollo', 'mercurius'])('GraphQL resolvers across 2 workers on %s', (driver) => {
  let workers: Worker<HttpCommand, HttpReply>[] = [];
  let urls: string[] = [];
  let ids = 0;
  const newId = (): string => `${driver}-${++ids}-${Date.now()}`;

  beforeAll(async () => {
    const env = { REDIS_URL: server.url, NS: `mp:graphql:${driver}:`, DRIVER: driver };
    workers = await Promise.all(
      [0, 1].map(() => Worker.start<HttpCommand, HttpReply>(env, WORKER)),
    );
    const ports = await Promise.all(workers.map((w) => w.ask<Port>({ cmd: 'port' })));
    urls = ports.map(({ port }) => `http://127.0.0.1:${port}`);
  }, 60_000);
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop()));
  });

  /** How often `name` ran, summed over both workers. */
  const runsOf = async (name: string): Promise<number> => {
    const counts = await Promise.all(
      urls.map(
        async (url) =>
          ((await (await fetch(`${url}/runs`)).json()) as Record<string, number>)[name] ?? 0,
      ),
    );
    return counts.reduce((a, b) => a + b, 0);
  };

  it('runs a query field once for 20 concurrent identical queries over both workers, then serves it from the cache', async () => {
    const id = newId();
    const text = `{ book(id: "${id}", ms: 300) { id pid run } }`;
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => ask(urls[i % 2]!, text)),
    );
    const later = await ask(urls[1]!, text);
    const runs = await runsOf(`book:${id}`);
    console.log(
      `[graphql ${driver}] 20 concurrent identical queries over 2 workers: ${runs} resolver run`,
    );
    expect(runs).toBe(1);
    expect(new Set(answers.map((a) => JSON.stringify(a))).size).toBe(1);
    expect(later).toEqual(answers[0]);
  });

  it('runs every mutation, in whichever worker', async () => {
    const id = newId();
    const text = `mutation { borrow(id: "${id}") { run } }`;
    await ask(urls[0]!, text);
    await ask(urls[1]!, text);
    await ask(urls[0]!, text);
    expect(await runsOf(`borrow:${id}`)).toBe(3);
  });

  it("never answers one user's request with another's run", async () => {
    const id = newId();
    const text = `{ book(id: "${id}") { pid run } }`;
    const alice = await ask(urls[0]!, text, { authorization: 'Bearer alice' });
    const bob = await ask(urls[1]!, text, { authorization: 'Bearer bob' });
    const anonymous = await ask(urls[1]!, text);
    const aliceAgain = await ask(urls[1]!, text, { authorization: 'Bearer alice' });
    // Four runs of their own: no two answers are one run (a worker's pid and its run number).
    const runs = [alice, bob, anonymous, aliceAgain].map(
      (a) => `${a['book']!.pid}:${a['book']!.run}`,
    );
    expect(new Set(runs).size).toBe(4);
    expect(await runsOf(`book:${id}`)).toBe(4);
  });
});
