import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import type { HttpCommand, HttpReply } from './http.protocol.js';
import { compileWorkers, Worker } from './flight.workers.js';

/**
 * BufferCacheInterceptor's rules across the fleet: two worker processes, each a Nest HTTP app on
 * one redis-server, on Express and on Fastify. What may be shared is served by one worker from the
 * other's build; a response with `Set-Cookie` never reaches another worker's client; a successful
 * POST in one worker deletes the entry the others would serve.
 */

const WORKER = '.build/multi-process/test/multi-process/http.worker.js';

type HttpWorker = Worker<HttpCommand, HttpReply>;
type Port = Extract<HttpReply, { port: number }>;

interface Answer {
  readonly status: number;
  readonly cache: string | null;
  readonly cookie: string | null;
  readonly body: { pid: number; run?: number };
}

let server: RedisServer;
beforeAll(async () => {
  compileWorkers();
  server = await startRedis();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe.each(['express', 'fastify'])(
  'BufferCacheInterceptor across 2 workers on %s',
  (platform) => {
    let workers: HttpWorker[] = [];
    let urls: string[] = [];
    let pids: number[] = [];

    beforeAll(async () => {
      const env = { REDIS_URL: server.url, NS: `mp:http:${platform}:`, PLATFORM: platform };
      workers = await Promise.all(
        [0, 1].map(() => Worker.start<HttpCommand, HttpReply>(env, WORKER)),
      );
      const ports = await Promise.all(workers.map((w) => w.ask<Port>({ cmd: 'port' })));
      urls = ports.map(({ port }) => `http://127.0.0.1:${port}`);
      pids = workers.map((w) => w.process.pid!);
    }, 60_000);
    afterAll(async () => {
      await Promise.all(workers.map((w) => w.stop()));
    });

    const call = async (worker: number, path: string, method = 'GET'): Promise<Answer> => {
      const response = await fetch(`${urls[worker]}${path}`, { method });
      return {
        status: response.status,
        cache: response.headers.get('x-cache'),
        cookie: response.headers.get('set-cookie'),
        body: (await response.json()) as Answer['body'],
      };
    };

    it("a shareable page built by one worker is the other's hit", async () => {
      const built = await call(0, '/item?case=shared');
      const taken = await call(1, '/item?case=shared');
      expect([built.cache, built.body.pid]).toEqual(['MISS', pids[0]]);
      expect([taken.cache, taken.body]).toEqual(['HIT', built.body]);
    });

    it("a response with Set-Cookie never reaches the other worker's client, nor a later one", async () => {
      const first = await call(0, '/welcome');
      const second = await call(1, '/welcome');
      const third = await call(0, '/welcome');
      expect(first.cookie).toBe(`sid=${pids[0]}-${first.body.run}; HttpOnly`);
      expect([second.cache, second.body.pid]).toEqual(['MISS', pids[1]]);
      expect(second.cookie).toBe(`sid=${pids[1]}-${second.body.run}; HttpOnly`);
      expect([third.cache, third.body.pid]).toEqual(['MISS', pids[0]]);
      expect(third.body.run).not.toBe(first.body.run);
    });

    it('a successful POST in one worker deletes the entry the other would serve', async () => {
      const before = await call(0, '/item');
      expect((await call(1, '/item')).body).toEqual(before.body);
      const write = await call(1, '/item', 'POST');
      expect([write.status, write.body.pid]).toEqual([201, pids[1]]);
      const after = await call(0, '/item');
      expect([after.cache, after.body.pid]).toEqual(['MISS', pids[0]]);
      expect(after.body.run).not.toBe(before.body.run);
      expect((await call(1, '/item')).body).toEqual(after.body);
    });
  },
);
