import {
  Controller,
  Get,
  Sse,
  UseInterceptors,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { get as httpGet, type ClientRequest } from 'node:http';
import { Observable } from 'rxjs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Streams pass through the interceptor: an `@Sse` route, or an Observable that emits more than
 * once, is neither cached nor coalesced, `hardTimeout` does not bound it, and the handler's
 * subscription ends with its client's, or with the app. Through Express and Fastify, on a real
 * redis-server.
 */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(condition: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!condition() && Date.now() < end) await sleep(10);
  return condition();
}

/** Half a second: shorter than every stream below. */
const HARD_TIMEOUT = 0.5;

/** Values `every` ms apart, `count` of them (forever without), counting live subscriptions. */
function ticking(every: number, count = Infinity): Observable<{ data: number }> {
  return new Observable<{ data: number }>((subscriber) => {
    subscriptions.live++;
    let n = 0;
    const timer = setInterval(() => {
      subscriber.next({ data: ++n });
      if (n >= count) subscriber.complete();
    }, every);
    return () => {
      subscriptions.live--;
      clearInterval(timer);
    };
  });
}

const subscriptions = { live: 0, made: 0 };

/** A controller of its own for each app: a handler known to stream is known per handler. */
function feedController(): Type {
  @Controller()
  @UseInterceptors(BufferCacheInterceptor)
  class FeedController {
    @Sse('ticks')
    ticks(): Observable<{ data: number }> {
      subscriptions.made++;
      return ticking(50);
    }

    @Get('countdown')
    countdown(): Observable<{ data: number }> {
      subscriptions.made++;
      return ticking(100, 8);
    }

    @Get('late')
    late(): Observable<{ data: number }> {
      subscriptions.made++;
      return ticking(700, 2);
    }
  }
  return FeedController;
}

const PLATFORMS = [
  { name: 'Express', adapter: (): ExpressAdapter => new ExpressAdapter() },
  { name: 'Fastify', adapter: (): FastifyAdapter => new FastifyAdapter() },
];

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const opened: INestApplication[] = [];
afterAll(async () => {
  for (const app of opened) await app.close();
});

let apps = 0;

async function start(platform: (typeof PLATFORMS)[number]): Promise<INestApplication> {
  const namespace = `test:streams:${platform.name}:${++apps}:`;
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        redis: () => server.client(),
        namespace,
        cacheDefaults: { hardTimeout: HARD_TIMEOUT },
      }),
    ],
    controllers: [feedController()],
  }).compile();
  // Open event streams keep their connections: closing the app closes them.
  const nest = ref.createNestApplication(platform.adapter(), {
    logger: false,
    forceCloseConnections: true,
  });
  opened.push(nest);
  await nest.init();
  if (platform.name === 'Fastify') {
    await (nest.getHttpAdapter().getInstance() as { ready: () => Promise<unknown> }).ready();
  }
  await nest.listen(0, '127.0.0.1');
  return nest;
}

/** An open event stream: the `data` of each event so far. */
interface EventStream {
  readonly events: string[];
  readonly request: ClientRequest;
}

async function listen(url: string): Promise<EventStream> {
  const events: string[] = [];
  return new Promise((resolve, reject) => {
    const made = httpGet(`${url}/ticks`, (response) => {
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        for (const line of chunk.split('\n'))
          if (line.startsWith('data: ')) events.push(line.slice(6));
      });
      response.on('error', () => {});
      resolve({ events, request: made });
    });
    made.on('error', reject);
  });
}

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: streams', (platform) => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    app = await start(platform);
    url = await app.getUrl();
  });

  it('an @Sse route under the interceptor streams live, past hardTimeout, and its subscription ends when the client leaves', async () => {
    const before = subscriptions.live;
    const stream = await listen(url);
    // Events come as they are made: the first ones long before hardTimeout...
    expect(await until(() => stream.events.length >= 2, 400)).toBe(true);
    // ...and the stream goes on past it.
    await sleep(HARD_TIMEOUT * 1000 + 300);
    expect(stream.events.length).toBeGreaterThan(10);
    expect(stream.events.slice(0, 3)).toEqual(['1', '2', '3']);
    stream.request.destroy();
    expect(await until(() => subscriptions.live === before, 2000)).toBe(true);
  });

  it('two clients of an @Sse route get a stream each, from a handler of their own', async () => {
    const made = subscriptions.made;
    const [one, two] = [await listen(url), await listen(url)];
    expect(await until(() => one.events.length >= 2 && two.events.length >= 2, 1000)).toBe(true);
    expect(subscriptions.made - made).toBe(2);
    one.request.destroy();
    two.request.destroy();
  });

  it('app.close() ends the subscriptions of the streams still open', async () => {
    const own = await start(platform);
    const before = subscriptions.live;
    const stream = await listen(await own.getUrl());
    expect(await until(() => stream.events.length >= 1, 1000)).toBe(true);
    expect(subscriptions.live).toBe(before + 1);
    stream.request.on('error', () => {});
    await own.close();
    expect(await until(() => subscriptions.live === before, 2000)).toBe(true);
  });

  it('an Observable that emits more than once is neither cached nor coalesced, and hardTimeout does not bound it', async () => {
    const made = subscriptions.made;
    // Eight values 100 ms apart: longer than hardTimeout.
    const replies = await Promise.all([
      request(url).get('/countdown'),
      (async () => {
        await sleep(100);
        return request(url).get('/countdown');
      })(),
    ]);
    expect(replies.map((reply) => [reply.status, reply.body])).toEqual([
      [200, { data: 8 }],
      [200, { data: 8 }],
    ]);
    const again = await request(url).get('/countdown');
    expect([again.status, again.body, again.headers['x-cache']]).toEqual([
      200,
      { data: 8 },
      undefined,
    ]);
    expect(subscriptions.made - made).toBe(3);
    expect(await until(() => subscriptions.live === 0, 1000)).toBe(true);
  });

  it("a build past hardTimeout ends its subscription to the handler's Observable; the request runs its own", async () => {
    const made = subscriptions.made;
    const live = subscriptions.live;
    // Sent now: a supertest request is sent once awaited.
    const reply = request(url)
      .get('/late')
      .then((response) => response);
    // The build fails at hardTimeout, before the first value: the request runs the handler anew.
    expect(await until(() => subscriptions.made === made + 2, 2000)).toBe(true);
    expect(subscriptions.live).toBe(live + 1);
    expect((await reply).body).toEqual({ data: 2 });
  });
});
