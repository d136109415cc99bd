import { CacheTTL } from '@nestjs/cache-manager';
import { Controller, Get, Query, Res, UseInterceptors } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCacheInterceptor,
  BufferLockConfigError,
  BufferLockModule,
} from '../../lib/index.js';
import {
  closeApps,
  PLATFORMS,
  send,
  startApp,
  type PlatformResponse,
} from '../support/http-apps.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * How long a response is kept, as it says (RFC 9111 §4.2.1): `s-maxage`, else `max-age`, else
 * `Expires` less `Date`, at most `http.maxTtl`; `stale-while-revalidate` as its grace; a response
 * already stale is not stored, nor one that says nothing under `http.requireFreshness`. Through
 * Express and Fastify, on a real redis-server.
 */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let runs = 0;

/** Sets `Cache-Control`, `Expires` and `Date` from the query, and counts its runs. */
function answer(query: Record<string, string | undefined>, res: PlatformResponse): { run: number } {
  if (query.cc) res.header('Cache-Control', query.cc);
  if (query.expires) res.header('Expires', query.expires);
  if (query.date) res.header('Date', query.date);
  return { run: ++runs };
}

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class PagesController {
  @Get('page')
  @CacheTTL(60_000)
  page(
    @Query() query: Record<string, string | undefined>,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    return answer(query, res);
  }

  @Get('brief')
  @CacheTTL(100)
  brief(
    @Query() query: Record<string, string | undefined>,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    return answer(query, res);
  }
}

@Controller('short')
@UseInterceptors(BufferCacheInterceptor.with({ maxTtl: 1 }))
class ShortController {
  @Get()
  page(
    @Query() query: Record<string, string | undefined>,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    return answer(query, res);
  }
}

@Controller('strict')
@UseInterceptors(BufferCacheInterceptor.with({ requireFreshness: true }))
class StrictController {
  @Get()
  page(
    @Query() query: Record<string, string | undefined>,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    return answer(query, res);
  }
}

const CONTROLLERS = [PagesController, ShortController, StrictController];

let server: RedisServer;
let apps = 0;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await closeApps();
  await server.stop();
});

const q = (params: Record<string, string>): string => new URLSearchParams(params).toString();

describe.each(PLATFORMS)(
  'BufferCacheInterceptor on $name: how long a response is kept',
  (platform) => {
    let url: string;
    beforeAll(async () => {
      const namespace = `test:freshness:${platform.name}:${++apps}:`;
      ({ url } = await startApp(platform, server, CONTROLLERS, { namespace }));
    });

    /** The X-Cache of two requests, then of one more after `ms`. */
    async function over(path: string, ms: number): Promise<(string | undefined)[]> {
      const first = await send(url, path);
      const second = await send(url, path);
      await sleep(ms);
      return [first.cache, second.cache, (await send(url, path)).cache];
    }

    it("max-age=1 keeps it 1 s, over the route's @CacheTTL of 60 s", async () => {
      expect(await over(`/page?${q({ cc: 'max-age=1', t: 'a' })}`, 1200)).toEqual([
        'MISS',
        'HIT',
        'MISS',
      ]);
    });

    it('s-maxage=1 is taken over max-age=60', async () => {
      expect(await over(`/page?${q({ cc: 'max-age=60, s-maxage=1' })}`, 1200)).toEqual([
        'MISS',
        'HIT',
        'MISS',
      ]);
    });

    it("max-age=60 keeps it past the route's @CacheTTL(100)", async () => {
      expect(await over(`/brief?${q({ cc: 'max-age=60' })}`, 300)).toEqual(['MISS', 'HIT', 'HIT']);
    });

    it.each(['max-age=0', 's-maxage=0, max-age=60', 'max-age=never'])(
      'a response with Cache-Control: %s is stale already: not stored',
      async (cc) => {
        expect(await over(`/page?${q({ cc })}`, 0)).toEqual(['MISS', 'MISS', 'MISS']);
      },
    );

    it('Expires less Date sets the ttl (1 s here, though both are an hour in the past)', async () => {
      const date = new Date(Date.now() - 3_600_000);
      const expires = new Date(date.getTime() + 1000);
      const path = `/page?${q({ date: date.toUTCString(), expires: expires.toUTCString() })}`;
      expect(await over(path, 1200)).toEqual(['MISS', 'HIT', 'MISS']);
    });

    it.each([
      ['an hour ago', new Date(Date.now() - 3_600_000).toUTCString()],
      ['invalid (0)', '0'],
    ])('a response whose Expires is %s, with no Date, is not stored', async (_what, expires) => {
      expect(await over(`/page?${q({ expires })}`, 0)).toEqual(['MISS', 'MISS', 'MISS']);
    });

    it('max-age=86400 on a route with maxTtl: 1 is kept 1 s', async () => {
      expect(await over(`/short?${q({ cc: 'max-age=86400' })}`, 1200)).toEqual([
        'MISS',
        'HIT',
        'MISS',
      ]);
    });

    it('stale-while-revalidate=30 is the grace: past max-age=1 the entry is served stale', async () => {
      const path = `/page?${q({ cc: 'max-age=1, stale-while-revalidate=30' })}`;
      const replies = await over(path, 1200);
      expect(replies).toEqual(['MISS', 'HIT', 'STALE']);
    });

    it('with requireFreshness, a response that says nothing of its freshness is not stored', async () => {
      expect(await over('/strict?none', 0)).toEqual(['MISS', 'MISS', 'MISS']);
      expect(await over(`/strict?${q({ cc: 'max-age=60' })}`, 0)).toEqual(['MISS', 'HIT', 'HIT']);
      const expires = new Date(Date.now() + 60_000).toUTCString();
      expect(await over(`/strict?${q({ expires })}`, 0)).toEqual(['MISS', 'HIT', 'HIT']);
    });

    it("without requireFreshness, it is kept for the route's ttl", async () => {
      expect(await over('/page?none', 0)).toEqual(['MISS', 'HIT', 'HIT']);
    });

    it('the module option http: { requireFreshness: true } applies to every route', async () => {
      const namespace = `test:freshness:${platform.name}:${++apps}:`;
      const own = await startApp(platform, server, CONTROLLERS, {
        namespace,
        http: { requireFreshness: true, maxTtl: 1 },
      });
      const first = await send(own.url, '/page?module');
      const second = await send(own.url, '/page?module');
      expect([first.cache, second.cache]).toEqual(['MISS', 'MISS']);
      const path = `/page?${q({ cc: 'max-age=60', m: '1' })}`;
      const [a, b] = [await send(own.url, path), await send(own.url, path)];
      await sleep(1200);
      expect([a.cache, b.cache, (await send(own.url, path)).cache]).toEqual([
        'MISS',
        'HIT',
        'MISS',
      ]);
    });
  },
);

describe('the http freshness options are validated', () => {
  it.each([
    [{ http: { maxTtl: 0 } }, 'http_max_ttl_invalid'],
    [{ http: { maxTtl: 'a day' } }, 'http_max_ttl_invalid'],
    [{ http: { requireFreshness: 'yes' } }, 'http_freshness_invalid'],
  ])('BufferLockModule.forRoot(%j) is refused with %s', async (options, code) => {
    const module = BufferLockModule.forRoot({ redis: 'memory://', ...(options as object) });
    const made = Test.createTestingModule({ imports: [module] }).compile();
    await expect(made).rejects.toMatchObject({ code });
  });

  it.each([
    [{ maxTtl: -1 }, 'http_max_ttl_invalid'],
    [{ requireFreshness: 1 }, 'http_freshness_invalid'],
  ])('BufferCacheInterceptor.with(%j) is refused with %s', (options, code) => {
    const made = (): unknown => BufferCacheInterceptor.with(options as never);
    expect(made).toThrow(BufferLockConfigError);
    expect(made).toThrow(expect.objectContaining({ code }));
  });
});
