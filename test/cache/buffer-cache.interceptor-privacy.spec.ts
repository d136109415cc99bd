import { CacheInterceptor, CacheKey, CacheModule } from '@nestjs/cache-manager';
import {
  Controller,
  Get,
  Headers,
  Query,
  UnauthorizedException,
  UseInterceptors,
  type DynamicModule,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferCacheInterceptor,
  BufferLockConfigError,
  BufferLockModule,
  Cached,
  type BufferLockOptions,
} from '../../lib/index.js';
import { LOOKUP } from '../../lib/cache/buffer-cache.service.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * What a cached route may hand to whom: only a value is shared, a request with `Cookie` is its own
 * and one with `Authorization` takes only what is marked shared (unless opted in), a URL key names
 * the method, the `Host` and the URL (and the `vary` headers), and no key of the user's names a
 * URL key. Through Express and Fastify, on a real redis-server.
 */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

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

@Controller()
class AccountController {
  @Get('me')
  async me(@Headers('authorization') auth?: string): Promise<object> {
    await gate.pass();
    if (!auth) throw new UnauthorizedException('no token');
    return { me: auth };
  }

  @Get('flaky')
  async flaky(@Headers('x-fail') fail?: string): Promise<object> {
    await gate.pass();
    if (fail) throw new UnauthorizedException('failed for this caller');
    return { ok: true };
  }

  @Get('profile')
  profile(
    @Headers('authorization') auth?: string,
    @Headers('cookie') cookie?: string,
    @Headers('host') host?: string,
    @Headers('accept-language') lang?: string,
    @Query('v') v?: string,
  ): object {
    return { auth: auth ?? null, cookie: cookie ?? null, host, lang: lang ?? null, v, run: ++runs };
  }

  @Get('daily')
  @CacheKey('daily-report')
  daily(): object {
    return { daily: ++runs };
  }
}

@Controller('admin')
class AdminController {
  @Get('stats')
  stats(): object {
    return { stats: 'the real ones', run: ++runs };
  }
}

@Controller()
class SearchController {
  @Get('search')
  @Cached((q: string) => q)
  async search(@Query('q') q: string): Promise<object> {
    return { stats: `attacker's results for ${q}` };
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

interface App {
  readonly nest: INestApplication;
  readonly url: string;
  /** The Host header a client sends to this app. */
  readonly host: string;
}

let apps = 0;

/** An app whose every route but `/search` is under `interceptor`. */
async function start(
  platform: Platform,
  interceptor: Type,
  options: Partial<BufferLockOptions> = {},
  cacheModule = false,
): Promise<App> {
  const namespace = `test:privacy:${platform.name}:${++apps}:`;
  const imports: DynamicModule[] = [
    BufferLockModule.forRoot({ redis: () => server.client(), namespace, ...options }),
  ];
  if (cacheModule) imports.push(CacheModule.register());
  @Controller()
  @UseInterceptors(interceptor)
  class Account extends AccountController {}
  @Controller('admin')
  @UseInterceptors(interceptor)
  class Admin extends AdminController {}
  const ref = await Test.createTestingModule({
    imports,
    controllers: [Account, Admin, SearchController],
  }).compile();
  const nest = ref.createNestApplication(platform.adapter(), { logger: false });
  opened.push(nest);
  await nest.init();
  if (platform.name === 'Fastify') {
    await (nest.getHttpAdapter().getInstance() as { ready: () => Promise<unknown> }).ready();
  }
  await nest.listen(0, '127.0.0.1');
  const url = await nest.getUrl();
  return { nest, url, host: new URL(url).host };
}

interface Reply {
  readonly status: number;
  readonly body: unknown;
  readonly cache: string | undefined;
}

async function get(app: App, path: string, headers: Record<string, string> = {}): Promise<Reply> {
  const response = await request(app.url).get(path).set(headers);
  const cache = (response.headers as Record<string, string | undefined>)['x-cache'];
  return { status: response.status, body: JSON.parse(response.text) as unknown, cache };
}

/** The anonymous `GET /me` starts first and fails; the other one arrives while it runs. */
async function meRace(app: App): Promise<{ replies: Reply[]; startedBefore: number }> {
  gate.close();
  const anonymous = get(app, '/me');
  await sleep(100);
  const bob = get(app, '/me', { authorization: 'Bearer bob' });
  await sleep(100);
  const startedBefore = gate.started;
  gate.release();
  return { replies: await Promise.all([anonymous, bob]), startedBefore };
}

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: what is shared', (platform) => {
  describe('only a value is shared', () => {
    it('two concurrent GET /me: the anonymous one gets 401, the one with a token its own 200, as under CacheInterceptor', async () => {
      const app = await start(platform, BufferCacheInterceptor);
      const { replies } = await meRace(app);
      expect(replies.map((reply) => [reply.status, reply.body])).toEqual([
        [401, { message: 'no token', error: 'Unauthorized', statusCode: 401 }],
        [200, { me: 'Bearer bob' }],
      ]);
      const theirs = await start(platform, CacheInterceptor, {}, true);
      const their = await meRace(theirs);
      expect(their.replies.map((reply) => [reply.status, reply.body])).toEqual(
        replies.map((reply) => [reply.status, reply.body]),
      );
    });

    it('with shareAuthorized the two are coalesced, and the one with a token still runs its own handler after the failure', async () => {
      const app = await start(platform, BufferCacheInterceptor, {
        http: { shareAuthorized: true },
      });
      const { replies, startedBefore } = await meRace(app);
      // The second request waited for the first one's build: one handler had started.
      expect(startedBefore).toBe(1);
      expect(replies.map((reply) => reply.status)).toEqual([401, 200]);
      expect(replies[1]!.body).toEqual({ me: 'Bearer bob' });
      expect(gate.started).toBe(2);
    });

    it('a coalesced request whose build failed with the other request error runs its own handler', async () => {
      const app = await start(platform, BufferCacheInterceptor);
      gate.close();
      const failing = get(app, '/flaky', { 'x-fail': '1' });
      await sleep(100);
      const other = get(app, '/flaky');
      await sleep(100);
      expect(gate.started).toBe(1);
      gate.release();
      const replies = await Promise.all([failing, other]);
      expect(replies.map((reply) => [reply.status, reply.body, reply.cache])).toEqual([
        [
          401,
          { message: 'failed for this caller', error: 'Unauthorized', statusCode: 401 },
          'MISS',
        ],
        [200, { ok: true }, 'MISS'],
      ]);
      expect(gate.started).toBe(2);
    });

    it("across two workers, the one that waited for the other's failed build runs its own handler", async () => {
      const namespace = `test:privacy:${platform.name}:workers:`;
      const [one, two] = [
        await start(platform, BufferCacheInterceptor, { namespace }),
        await start(platform, BufferCacheInterceptor, { namespace }),
      ];
      const host = { host: 'shop.example' };
      gate.close();
      const failing = get(one, '/flaky', { ...host, 'x-fail': '1' });
      await sleep(100);
      const other = get(two, '/flaky', host);
      await sleep(100);
      // The second worker waits for the first one's lock.
      expect(gate.started).toBe(1);
      gate.release();
      const replies = await Promise.all([failing, other]);
      expect(replies.map((reply) => [reply.status, reply.body])).toEqual([
        [401, { message: 'failed for this caller', error: 'Unauthorized', statusCode: 401 }],
        [200, { ok: true }],
      ]);
      expect(gate.started).toBe(2);
    });
  });

  describe('a request with Authorization or Cookie is its own', () => {
    let app: App;
    beforeAll(async () => {
      app = await start(platform, BufferCacheInterceptor);
    });

    // With `Cookie` the request passes (no `X-Cache`); with `Authorization` its handler runs
    // (`MISS`): a response that does not say `public` is neither stored nor taken.
    it.each([
      ['Authorization', { authorization: 'alice' }, 'MISS'],
      ['Cookie', { cookie: 'sid=alice' }, undefined],
      ['an empty Authorization', { authorization: '' }, 'MISS'],
    ])(
      'after a request with %s, an anonymous one gets its own answer',
      async (_what, headers, cache) => {
        const path = `/profile?v=${encodeURIComponent(JSON.stringify(headers))}`;
        const alice = await get(app, path, headers);
        const again = await get(app, path, headers);
        const anonymous = await get(app, path);
        expect([alice.cache, again.cache]).toEqual([cache, cache]);
        expect((again.body as { run: number }).run).toBe((alice.body as { run: number }).run + 1);
        expect(anonymous.cache).toBe('MISS');
        expect(anonymous.body).toMatchObject({ auth: null, cookie: null });
        // The anonymous answer is cached for anonymous callers only: one with a token runs anew.
        expect((await get(app, path)).cache).toBe('HIT');
        const last = await get(app, path, headers);
        expect(last.cache).toBe(cache);
        expect((last.body as { run: number }).run).toBe(
          (anonymous.body as { run: number }).run + 1,
        );
      },
    );

    it('a response built for Host: evil.example is not served to another host', async () => {
      const evil = await get(app, '/profile?v=host', { host: 'evil.example' });
      const own = await get(app, '/profile?v=host');
      expect(evil.body).toMatchObject({ host: 'evil.example' });
      expect(own.cache).toBe('MISS');
      expect(own.body).toMatchObject({ host: app.host });
      expect((await get(app, '/profile?v=host', { host: 'evil.example' })).cache).toBe('HIT');
    });

    it('a Host with a port other than the one the request came in on is a key of its own', async () => {
      const hostname = new URL(app.url).hostname;
      const injected = await get(app, '/profile?v=port', { host: `${hostname}:1337` });
      expect(injected.body).toMatchObject({ host: `${hostname}:1337` });
      const own = await get(app, '/profile?v=port');
      expect([own.cache, own.body]).toEqual(['MISS', expect.objectContaining({ host: app.host })]);
      // The port it came in on is the bare host name's entry.
      expect((await get(app, '/profile?v=port', { host: hostname })).cache).toBe('HIT');
    });

    it("supertest's request(app.getHttpServer()), a new port per request, gets its hits", async () => {
      const httpServer = app.nest.getHttpServer() as Parameters<typeof request>[0];
      const replies = [
        await request(httpServer).get('/profile?v=supertest'),
        await request(httpServer).get('/profile?v=supertest'),
      ];
      expect(replies.map((reply) => reply.headers['x-cache'])).toEqual(['MISS', 'HIT']);
    });

    it('without vary, Accept-Language is not in the key', async () => {
      await get(app, '/profile?v=lang', { 'accept-language': 'fr' });
      const en = await get(app, '/profile?v=lang', { 'accept-language': 'en' });
      expect([en.cache, en.body]).toEqual(['HIT', expect.objectContaining({ lang: 'fr' })]);
    });
  });

  describe.each([
    [
      'the module option http: { vary }',
      () => [BufferCacheInterceptor, { vary: ['Accept-Language'] }],
    ],
    [
      'BufferCacheInterceptor.with({ vary })',
      () => [BufferCacheInterceptor.with({ vary: ['accept-language'] }), {}],
    ],
  ] as const)('%s', (_name, made) => {
    it('an answer in fr is not served to en, and is served to fr', async () => {
      const [interceptor, http] = made() as [Type, BufferLockOptions['http']];
      const app = await start(platform, interceptor, { http });
      const fr = await get(app, '/profile?v=vary', { 'accept-language': 'fr' });
      const en = await get(app, '/profile?v=vary', { 'accept-language': 'en' });
      const frAgain = await get(app, '/profile?v=vary', { 'Accept-Language': 'fr' });
      expect([fr.cache, en.cache, frAgain.cache]).toEqual(['MISS', 'MISS', 'HIT']);
      expect(en.body).toMatchObject({ lang: 'en' });
      expect(frAgain.body).toEqual(fr.body);
    });
  });

  describe.each([
    [
      'the module option http: { shareAuthorized: true }',
      () => [BufferCacheInterceptor, { shareAuthorized: true }],
    ],
    [
      'BufferCacheInterceptor.with({ shareAuthorized: true })',
      () => [BufferCacheInterceptor.with({ shareAuthorized: true }), {}],
    ],
  ] as const)('%s', (_name, made) => {
    it('requests with Authorization are cached and shared, as the route asked', async () => {
      const [interceptor, http] = made() as [Type, BufferLockOptions['http']];
      const app = await start(platform, interceptor, { http });
      const alice = await get(app, '/profile?v=shared', { authorization: 'alice' });
      const anonymous = await get(app, '/profile?v=shared');
      expect([alice.cache, anonymous.cache]).toEqual(['MISS', 'HIT']);
      expect(anonymous.body).toEqual(alice.body);
    });
  });

  describe('URL keys are apart from every other key', () => {
    it("@Cached((q) => q) on GET /search?q=/admin/stats does not answer the admin's GET /admin/stats", async () => {
      const app = await start(platform, BufferCacheInterceptor);
      const attack = await get(app, `/search?q=${encodeURIComponent('/admin/stats')}`);
      expect(attack.body).toEqual({ stats: "attacker's results for /admin/stats" });
      const admin = await get(app, '/admin/stats');
      expect(admin.cache).toBe('MISS');
      expect(admin.body).toMatchObject({ stats: 'the real ones' });
    });

    it('a key made to look like a URL key, through @Cached, getOrSet and set, names none', async () => {
      const app = await start(platform, BufferCacheInterceptor);
      const cache = app.nest.get(BufferCache);
      // `r3` (the format of its entries), then the Host without the port it came in on, as the
      // interceptor keys it.
      const urlKey = `r3${JSON.stringify(['GET', new URL(app.url).hostname, '/admin/stats'])}`;
      const forged = ['\u0000u', '\u0000', '', '\u0000\u0000u'].map((head) => head + urlKey);
      for (const key of forged) await get(app, `/search?q=${encodeURIComponent(key)}`);
      await cache.set(forged[1]!, { stats: 'forged' });
      await cache.getOrSet(`${forged[0]!}:own`, () => ({ stats: 'forged' }));
      const admin = await get(app, '/admin/stats');
      expect(admin.cache).toBe('MISS');
      expect(admin.body).toMatchObject({ stats: 'the real ones' });
      // And no key of the user's reads the admin's entry back...
      for (const key of forged) expect(await cache.get(key)).not.toEqual(admin.body);
      // ...which lives under the URL key the forged ones copy, the body in the stored response.
      const held = await cache[LOOKUP](urlKey, () => ({ none: true }), undefined, 'u');
      expect(held).toMatchObject({
        value: expect.objectContaining({ b: admin.body }),
        status: 'hit',
      });
    });

    it("@CacheKey('daily-report') is the user's own key, the one getOrSet and get name", async () => {
      const app = await start(platform, BufferCacheInterceptor);
      const cache = app.nest.get(BufferCache);
      const daily = await get(app, '/daily');
      expect(daily.cache).toBe('MISS');
      expect(await cache.get('daily-report')).toEqual(daily.body);
      await cache.set('daily-report', { daily: 'set by hand' });
      expect((await get(app, '/daily')).body).toEqual({ daily: 'set by hand' });
    });
  });
});

describe('the http options are validated', () => {
  it.each([
    [{ http: 'x' }, 'http_invalid'],
    [{ http: { shareAuthorized: 'yes' } }, 'http_authorized_invalid'],
    [{ http: { vary: 'accept-language' } }, 'http_vary_invalid'],
    [{ http: { vary: ['accept language'] } }, 'http_vary_invalid'],
    [{ http: { vary: [42] } }, 'http_vary_invalid'],
  ])('BufferLockModule.forRoot(%j) is refused with %s', async (options, code) => {
    const module = BufferLockModule.forRoot({ redis: 'memory://', ...(options as object) });
    const made = Test.createTestingModule({ imports: [module] }).compile();
    await expect(made).rejects.toMatchObject({ code });
  });

  it.each([
    ['x', 'http_invalid'],
    [{ shareAuthorized: 1 }, 'http_authorized_invalid'],
    [{ vary: ['a\nb'] }, 'http_vary_invalid'],
  ])('BufferCacheInterceptor.with(%j) is refused with %s', (options, code) => {
    const made = (): unknown => BufferCacheInterceptor.with(options as never);
    expect(made).toThrow(BufferLockConfigError);
    expect(made).toThrow(expect.objectContaining({ code }));
  });
});
