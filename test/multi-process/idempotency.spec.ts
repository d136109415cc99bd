import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import type { HttpCommand, HttpReply } from './http.protocol.js';
import { compileWorkers, Worker } from './flight.workers.js';

/**
 * `@Idempotent` across the fleet: two worker processes, each a Nest HTTP app on one
 * redis-server, on Express and on Fastify. A key's request runs once whichever worker its
 * retries reach; a duplicate sent while it runs is refused (409) or waits for it; a reuse with
 * another payload is refused (422); another caller's key is its own; a worker killed mid-request
 * frees its key once the lock's ttl has passed, and not before.
 */

const WORKER = '.build/multi-process/test/multi-process/idempotency.worker.js';

type IdempotencyWorker = Worker<HttpCommand, HttpReply>;
type Port = Extract<HttpReply, { port: number }>;

interface Answer {
  readonly status: number;
  readonly replayed: string | null;
  readonly body: { pid?: number; run?: number; item?: unknown; code?: string };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const post = async (
  url: string,
  path: string,
  key: string,
  item: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> => {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
    body: JSON.stringify({ item }),
  });
  return {
    status: response.status,
    replayed: response.headers.get('idempotent-replayed'),
    body: (await response.json()) as Answer['body'],
  };
};

let server: RedisServer;
beforeAll(async () => {
  compileWorkers();
  server = await startRedis();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe.each(['express', 'fastify'])('@Idempotent across 2 workers on %s', (platform) => {
  const env = { NS: `mp:idempotency:${platform}:`, PLATFORM: platform };
  let workers: IdempotencyWorker[] = [];
  let urls: string[] = [];
  let keys = 0;
  const newKey = (): string => `${platform}-${++keys}-${Date.now()}`;

  const urlOf = async (worker: IdempotencyWorker): Promise<string> =>
    `http://127.0.0.1:${(await worker.ask<Port>({ cmd: 'port' })).port}`;

  beforeAll(async () => {
    workers = await Promise.all(
      [0, 1].map(() =>
        Worker.start<HttpCommand, HttpReply>({ ...env, REDIS_URL: server.url }, WORKER),
      ),
    );
    urls = await Promise.all(workers.map(urlOf));
  }, 60_000);
  afterAll(async () => {
    await Promise.all(workers.map((w) => w.stop()));
  });

  /** How often `key`'s handler ran, in each of `at`. */
  const runsOf = async (key: string, at: readonly string[] = urls): Promise<number[]> =>
    Promise.all(
      at.map(
        async (url) =>
          ((await (await fetch(`${url}/runs`)).json()) as Record<string, number>)[key] ?? 0,
      ),
    );
  const started = async (key: string, url: string): Promise<void> => {
    while ((await runsOf(key, [url]))[0] === 0) await sleep(10);
  };

  it("answers a duplicate sent to the other worker while the first runs with a 409, and replays the first's response once it is done", async () => {
    const key = newKey();
    const first = post(urls[0]!, '/orders?ms=500', key, 'tea');
    await started(key, urls[0]!);
    const duplicate = await post(urls[1]!, '/orders?ms=500', key, 'tea');
    const done = await first;
    const retry = await post(urls[1]!, '/orders?ms=500', key, 'tea');
    expect(duplicate.status).toBe(409);
    expect(duplicate.body.code).toBe('idempotency_in_progress');
    expect([done.status, done.body.pid]).toEqual([201, workers[0]!.process.pid]);
    expect([retry.status, retry.replayed, retry.body]).toEqual([201, 'true', done.body]);
    expect(await runsOf(key)).toEqual([1, 0]);
  });

  it("with onBusy: 'wait', 20 concurrent duplicates over both workers are one run, and each gets its response", async () => {
    const key = newKey();
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => post(urls[i % 2]!, '/waited-orders?ms=300', key, 'tea')),
    );
    const runs = await runsOf(key);
    console.log(
      `[idempotency ${platform}] 20 concurrent duplicates: runs per worker ${JSON.stringify(runs)}, statuses ${[...new Set(answers.map((a) => a.status))].join(',')}, replays ${answers.filter((a) => a.replayed === 'true').length}`,
    );
    expect(runs[0]! + runs[1]!).toBe(1);
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201));
    expect(new Set(answers.map((a) => JSON.stringify(a.body))).size).toBe(1);
    expect(answers.filter((a) => a.replayed === 'true')).toHaveLength(19);
  });

  it('refuses the key reused with another payload on the other worker (422), running nothing', async () => {
    const key = newKey();
    const first = await post(urls[0]!, '/orders', key, 'tea');
    const reuse = await post(urls[1]!, '/orders', key, 'coffee');
    expect([first.status, reuse.status, reuse.body.code]).toEqual([
      201,
      422,
      'idempotency_key_reused',
    ]);
    expect(await runsOf(key)).toEqual([1, 0]);
  });

  it("never replays one caller's response to another caller with the same key", async () => {
    const key = newKey();
    const alice = await post(urls[0]!, '/orders', key, 'tea', { authorization: 'Bearer alice' });
    const bob = await post(urls[1]!, '/orders', key, 'tea', { authorization: 'Bearer bob' });
    const aliceAgain = await post(urls[1]!, '/orders', key, 'tea', {
      authorization: 'Bearer alice',
    });
    expect([alice.body.pid, bob.body.pid]).toEqual([
      workers[0]!.process.pid,
      workers[1]!.process.pid,
    ]);
    expect(bob.replayed).toBeNull();
    expect([aliceAgain.replayed, aliceAgain.body]).toEqual(['true', alice.body]);
    expect(await runsOf(key)).toEqual([1, 1]);
  });

  it('leaves the key free when the handler fails in one worker: the retry runs in the other', async () => {
    const key = newKey();
    const failed = await post(urls[0]!, '/flaky-orders', key, 'tea', { 'x-fail': '503' });
    const retry = await post(urls[1]!, '/flaky-orders', key, 'tea');
    const again = await post(urls[0]!, '/flaky-orders', key, 'tea');
    expect([failed.status, retry.status, again.status]).toEqual([503, 201, 201]);
    expect([retry.body.pid, again.replayed, again.body]).toEqual([
      workers[1]!.process.pid,
      'true',
      retry.body,
    ]);
    expect(await runsOf(key)).toEqual([1, 1]);
  });

  it("with storeErrors, replays one worker's 4xx in the other", async () => {
    const key = newKey();
    const first = await post(urls[0]!, '/remembered-orders', key, 'tea', { 'x-fail': '404' });
    const retry = await post(urls[1]!, '/remembered-orders', key, 'tea');
    expect([first.status, retry.status, retry.replayed]).toEqual([404, 404, 'true']);
    expect(retry.body).toEqual(first.body);
    expect(await runsOf(key)).toEqual([1, 0]);
  });

  it('replays for expiresAfter only (1 s): later, the key runs again in the other worker', async () => {
    const key = newKey();
    const first = await post(urls[0]!, '/brief-orders', key, 'tea');
    const replayed = await post(urls[1]!, '/brief-orders', key, 'tea');
    await sleep(1_100);
    const later = await post(urls[1]!, '/brief-orders', key, 'tea');
    expect([first.status, replayed.replayed, later.status, later.replayed]).toEqual([
      201,
      'true',
      201,
      null,
    ]);
    expect(await runsOf(key)).toEqual([1, 1]);
  });

  it('refuses a request without the key in either worker (400), running nothing', async () => {
    const answers = await Promise.all(
      urls.map(async (url) => {
        const response = await fetch(`${url}/orders`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ item: 'tea' }),
        });
        return [response.status, ((await response.json()) as { code: string }).code];
      }),
    );
    expect(answers).toEqual([
      [400, 'idempotency_key_missing'],
      [400, 'idempotency_key_missing'],
    ]);
  });

  it("frees the key of a worker killed mid-request once its lock's ttl (1 s) has passed, not before", async () => {
    const doomed = await Worker.start<HttpCommand, HttpReply>(
      { ...env, REDIS_URL: server.url },
      WORKER,
    );
    const doomedUrl = await urlOf(doomed);
    const key = newKey();
    // Held for a minute, and extended while it runs: only the process's death lets go.
    void post(doomedUrl, '/short-lock-orders?ms=60000', key, 'tea').catch(() => {});
    await started(key, doomedUrl);
    await sleep(1_200);
    const whileAlive = await post(urls[1]!, '/short-lock-orders', key, 'tea');
    doomed.process.kill('SIGKILL');
    const killedAt = Date.now();
    const rightAfter = await post(urls[1]!, '/short-lock-orders', key, 'tea');
    let retry = rightAfter;
    while (retry.status === 409 && Date.now() - killedAt < 5_000) {
      await sleep(50);
      retry = await post(urls[1]!, '/short-lock-orders', key, 'tea');
    }
    const freedAfter = Date.now() - killedAt;
    console.log(
      `[idempotency ${platform}] worker killed mid-request: key free ${freedAfter} ms after the kill (lock ttl 1 s)`,
    );
    expect([whileAlive.status, rightAfter.status]).toEqual([409, 409]);
    expect([retry.status, retry.replayed, retry.body.pid]).toEqual([
      201,
      null,
      workers[1]!.process.pid,
    ]);
    expect(freedAfter).toBeLessThan(1_500);
    const again = await post(urls[0]!, '/short-lock-orders', key, 'tea');
    expect([again.replayed, again.body]).toEqual(['true', retry.body]);
    expect(await runsOf(key)).toEqual([0, 1]);
  });
});
