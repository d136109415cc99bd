import { CacheKey, CacheTTL } from '@nestjs/cache-manager';
import {
  Controller,
  Get,
  Query,
  Res,
  UseInterceptors,
  type INestApplication,
} from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCacheInterceptor,
  BufferLockModule,
  type BufferLockOptions,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * What a shared cache may store of a response, as RFC 9111 and Varnish's built-in policy say: a
 * status cacheable by default, and nothing marked `no-store`, `private` or `no-cache`, nothing
 * setting a cookie, nothing with `Vary: *`. What is not stored is not handed to the requests that
 * waited on it either. What is stored is replayed with its status and `Content-Type`. Through
 * Express and Fastify, on a real redis-server.
 */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Express's `Response` and Fastify's `FastifyReply` both have these. */
interface PlatformResponse {
  status(code: number): unknown;
  header(name: string, value: string): unknown;
}

/** A gate the test opens: handlers wait on it, so that requests overlap. */
class Gate {
  started = 0;
  private opened: Promise<void> = Promise.resolve();
  private open: () => void = () => {};

  close(): void {
    this.started = 0;
    this.opened = new Promise((resolve) => (this.open = resolve));
  }

  async pass(): Promise<void> {
    this.started++;
    await this.opened;
  }

  release(): void {
    this.open();
  }
}

const gate = new Gate();
let runs = 0;
/** Whether `GET /item` finds its item. */
const item = { missing: false };

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class PagesController {
  @Get('csrf')
  async csrf(@Res({ passthrough: true }) res: PlatformResponse): Promise<object> {
    await gate.pass();
    const token = `token-${++runs}`;
    res.header('Set-Cookie', `csrf=${token}; HttpOnly`);
    return { token };
  }

  @Get('controlled')
  controlled(
    @Query('cc') cacheControl: string,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    res.header('Cache-Control', cacheControl);
    return { data: `for visitor ${++runs}` };
  }

  @Get('public')
  publicPage(@Res({ passthrough: true }) res: PlatformResponse): object {
    res.header('Cache-Control', 'public, max-age=60');
    return { run: ++runs };
  }

  @Get('any-variant')
  anyVariant(@Res({ passthrough: true }) res: PlatformResponse): object {
    res.header('Vary', 'Accept, *');
    return { run: ++runs };
  }

  @Get('status')
  withStatus(
    @Query('code') code: string,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    res.status(Number(code));
    return { code: Number(code), run: ++runs };
  }

  @Get('csv')
  csv(@Res({ passthrough: true }) res: PlatformResponse): string {
    res.header('Content-Type', 'text/csv; charset=utf-8');
    return `run,${++runs}`;
  }

  @Get('item')
  @CacheTTL(200)
  findItem(@Res({ passthrough: true }) res: PlatformResponse): object {
    if (item.missing) res.status(404);
    return { found: !item.missing, run: ++runs };
  }

  @Get('keyed-missing')
  @CacheKey('keyed-missing')
  keyedMissing(@Res({ passthrough: true }) res: PlatformResponse): object {
    res.status(404);
    return { run: ++runs };
  }
}

interface Platform {
  readonly name: string;
  readonly adapter: () => ExpressAdapter | FastifyAdapter;
}

const PLATFORMS: Platform[] = [
  { name: 'Express', adapter: () => new ExpressAdapter() },
  { name: 'Fastify', adapter: () => new FastifyAdapter() },
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

async function start(
  platform: Platform,
  namespace = `test:response-rules:${platform.name}:${++apps}:`,
  options: Partial<BufferLockOptions> = {},
): Promise<string> {
  const ref = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: () => server.client(), namespace, ...options })],
    controllers: [PagesController],
  }).compile();
  const nest = ref.createNestApplication(platform.adapter(), { logger: false });
  opened.push(nest);
  await nest.init();
  if (platform.name === 'Fastify') {
    await (nest.getHttpAdapter().getInstance() as { ready: () => Promise<unknown> }).ready();
  }
  await nest.listen(0, '127.0.0.1');
  return nest.getUrl();
}

interface Reply {
  readonly status: number;
  readonly text: string;
  readonly cache: string | undefined;
  readonly type: string | undefined;
  readonly cookie: unknown;
}

async function get(url: string, path: string): Promise<Reply> {
  const response = await request(url).get(path);
  const headers = response.headers as Record<string, string | undefined>;
  return {
    status: response.status,
    text: response.text,
    cache: headers['x-cache'],
    type: headers['content-type'],
    cookie: headers['set-cookie'],
  };
}

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: what is stored', (platform) => {
  let url: string;
  beforeAll(async () => {
    url = await start(platform);
  });

  it('a response that sets a cookie is not stored: each visitor gets a CSRF token of its own', async () => {
    const first = await get(url, '/csrf');
    const second = await get(url, '/csrf');
    expect(first.text).not.toBe(second.text);
    expect([first.cache, second.cache]).toEqual(['MISS', 'MISS']);
    expect(second.cookie).toEqual([
      `csrf=${(JSON.parse(second.text) as { token: string }).token}; HttpOnly`,
    ]);
  });

  it('a visitor waiting on a build that set a cookie runs its own handler, and gets its own token', async () => {
    gate.close();
    const first = get(url, '/csrf?wait');
    await sleep(100);
    const second = get(url, '/csrf?wait');
    await sleep(100);
    // The second request waits on the first one's build.
    expect(gate.started).toBe(1);
    gate.release();
    const replies = await Promise.all([first, second]);
    expect(gate.started).toBe(2);
    expect(replies[0]!.text).not.toBe(replies[1]!.text);
    const tokens = replies.map((reply) => (JSON.parse(reply.text) as { token: string }).token);
    expect(replies.map((reply) => reply.cookie)).toEqual(
      tokens.map((token) => [`csrf=${token}; HttpOnly`]),
    );
  });

  it('across two workers, the one that waited for a build that set a cookie runs its own handler', async () => {
    const namespace = `test:response-rules:${platform.name}:workers:`;
    const [one, two] = [await start(platform, namespace), await start(platform, namespace)];
    gate.close();
    const first = get(one, '/csrf?workers');
    await sleep(100);
    const second = get(two, '/csrf?workers');
    await sleep(100);
    // The second worker waits for the first one's lock.
    expect(gate.started).toBe(1);
    gate.release();
    const replies = await Promise.all([first, second]);
    expect(gate.started).toBe(2);
    const tokens = replies.map((reply) => (JSON.parse(reply.text) as { token: string }).token);
    expect(tokens[0]).not.toBe(tokens[1]);
    expect(replies.map((reply) => reply.cookie)).toEqual(
      tokens.map((token) => [`csrf=${token}; HttpOnly`]),
    );
  });

  it.each(['private, no-store', 'no-store', 'private', 'no-cache', 'Private="x-user"', 'NO-STORE'])(
    'a response with Cache-Control: %s is not stored: the next visitor gets its own data',
    async (cacheControl) => {
      const path = `/controlled?cc=${encodeURIComponent(cacheControl)}`;
      const first = await get(url, path);
      const second = await get(url, path);
      expect(second.cache).toBe('MISS');
      expect(second.text).not.toBe(first.text);
    },
  );

  it('a response with Cache-Control: public is stored', async () => {
    const first = await get(url, '/public');
    const second = await get(url, '/public');
    expect([first.cache, second.cache]).toEqual(['MISS', 'HIT']);
    expect(second.text).toBe(first.text);
  });

  it('a response with Vary: * is not stored', async () => {
    const first = await get(url, '/any-variant');
    const second = await get(url, '/any-variant');
    expect(second.cache).toBe('MISS');
    expect(second.text).not.toBe(first.text);
  });

  it.each([503, 500, 201, 302, 429])(
    'a %i the handler set is neither stored nor replayed as a 200',
    async (code) => {
      const first = await get(url, `/status?code=${code}`);
      const second = await get(url, `/status?code=${code}`);
      expect([first.status, second.status]).toEqual([code, code]);
      expect(second.cache).toBe('MISS');
      expect(second.text).not.toBe(first.text);
    },
  );

  it.each([404, 410, 203])(
    'a %i the handler set is stored, and replayed with its status',
    async (code) => {
      const first = await get(url, `/status?code=${code}`);
      const second = await get(url, `/status?code=${code}`);
      expect([first.status, second.status]).toEqual([code, code]);
      expect([first.cache, second.cache]).toEqual(['MISS', 'HIT']);
      expect(second.text).toBe(first.text);
    },
  );

  it('a Content-Type the handler set is replayed with the body', async () => {
    const first = await get(url, '/csv');
    const second = await get(url, '/csv');
    expect([first.cache, second.cache]).toEqual(['MISS', 'HIT']);
    expect(second.text).toBe(first.text);
    expect(second.type).toBe('text/csv; charset=utf-8');
  });

  it("under a key of the user's (@CacheKey), a status the handler set is not stored: the entry is the value alone", async () => {
    const first = await get(url, '/keyed-missing');
    const second = await get(url, '/keyed-missing');
    expect([first.status, second.status]).toEqual([404, 404]);
    expect(second.cache).toBe('MISS');
    expect(second.text).not.toBe(first.text);
  });

  it.each([
    ['still misses its item', true],
    ['now finds its item', false],
  ])(
    'a stale 404 refreshed by a handler that %s: each body comes with its own status',
    async (_what, missing) => {
      const own = await start(platform, undefined, { cacheDefaults: { grace: 60 } });
      item.missing = true;
      const replies = [await get(own, '/item')];
      await sleep(300);
      item.missing = missing;
      replies.push(await get(own, '/item'));
      // The refresh ran behind the stale answer.
      await sleep(300);
      replies.push(await get(own, '/item'), await get(own, '/item'));
      expect(replies[1]!.cache).toBe('STALE');
      for (const reply of replies) {
        const { found } = JSON.parse(reply.text) as { found: boolean };
        expect([reply.status, found]).toEqual(found ? [200, true] : [404, false]);
      }
    },
  );
});
