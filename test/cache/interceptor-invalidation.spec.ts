import {
  Body,
  ConflictException,
  Controller,
  Delete,
  Get,
  HttpCode,
  Param,
  Patch,
  Post,
  Put,
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
  type BufferCacheStore,
  type BufferLockOptions,
} from '../../lib/index.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Invalidation by request (RFC 9111 §4.4): a POST, PUT, PATCH or DELETE through
 * `BufferCacheInterceptor` whose response is 2xx or 3xx deletes, fleet-wide, the GET entries of
 * its URL, and of a `Location` or `Content-Location` on the same host, before its response is
 * sent. Through Express and Fastify, on a real redis-server.
 */

/** Express's `Response` and Fastify's `FastifyReply` both have these. */
interface PlatformResponse {
  status(code: number): unknown;
  header(name: string, value: string): unknown;
}

const notes = new Map<string, string>();
let runs = 0;
let created = 0;

@Controller('notes')
@UseInterceptors(BufferCacheInterceptor)
class NotesController {
  @Get()
  list(): object {
    return { notes: [...notes.keys()], run: ++runs };
  }

  @Get(':id')
  read(@Param('id') id: string): object {
    return { id, text: notes.get(id) ?? null, run: ++runs };
  }

  @Post()
  create(
    @Body() body: { text: string },
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    const id = `n${++created}`;
    notes.set(id, body.text);
    res.header('Location', `/notes/${id}`);
    return { id };
  }

  @Put(':id')
  replace(@Param('id') id: string, @Body() body: { text: string }): object {
    notes.set(id, body.text);
    return { id };
  }

  @Patch(':id')
  edit(
    @Param('id') id: string,
    @Body() body: { text: string },
    @Query('refuse') refuse: string | undefined,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    if (refuse === 'throw') throw new ConflictException('edited elsewhere');
    if (refuse) {
      res.status(Number(refuse));
      return { refused: true };
    }
    notes.set(id, body.text);
    return { id };
  }

  @Delete(':id')
  @HttpCode(204)
  remove(@Param('id') id: string): void {
    notes.delete(id);
  }

  /** Adds to a note, and names it (and a copy elsewhere) in its response headers. */
  @Post(':id/append')
  append(
    @Param('id') id: string,
    @Body() body: { text: string; at: string; copy?: string },
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    notes.set(id, `${notes.get(id) ?? ''}${body.text}`);
    res.header('Content-Location', `${body.at}/notes/${id}`);
    if (body.copy) res.header('Location', body.copy);
    return { id };
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
  options: Partial<BufferLockOptions> = {},
  logger = new MemoryLogger(),
  namespace = `test:invalidation:${platform.name}:${++apps}:`,
): Promise<string> {
  const ref = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: () => server.client(), namespace, ...options })],
    controllers: [NotesController],
  }).compile();
  const nest = ref.createNestApplication(platform.adapter(), { logger });
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
  readonly body: { run?: number; text?: string | null; notes?: string[]; id?: string };
  readonly cache: string | undefined;
}

async function get(url: string, path: string, headers: Record<string, string> = {}) {
  const response = await request(url).get(path).set(headers);
  return {
    status: response.status,
    body: response.body as Reply['body'],
    cache: (response.headers as Record<string, string | undefined>)['x-cache'],
  };
}

/** GETs `path` until it is a HIT: its entry is stored. */
async function cached(url: string, path: string, headers: Record<string, string> = {}) {
  const first = await get(url, path, headers);
  const again = await get(url, path, headers);
  expect(again.cache).toBe('HIT');
  expect(again.body.run).toBe(first.body.run);
  return again;
}

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: a write invalidates', (platform) => {
  let url: string;
  beforeAll(async () => {
    url = await start(platform);
  });

  it('a GET cached, a POST to the same URL, and the next GET runs its handler again', async () => {
    const before = await cached(url, '/notes');
    const post = await request(url).post('/notes').send({ text: 'first' });
    expect(post.status).toBe(201);
    // The POST itself is not cached: no X-Cache.
    expect(post.headers['x-cache']).toBeUndefined();
    const after = await get(url, '/notes');
    expect(after.cache).toBe('MISS');
    expect(after.body.run).toBeGreaterThan(before.body.run!);
    expect(after.body.notes).toContain((post.body as { id: string }).id);
  });

  it.each([
    ['PUT', (path: string) => request(url).put(path).send({ text: 'put' }), 'put'],
    ['PATCH', (path: string) => request(url).patch(path).send({ text: 'patched' }), 'patched'],
    ['DELETE', (path: string) => request(url).delete(path), null],
  ] as const)(
    'a %s that succeeds: the next GET of its URL builds again',
    async (_, write, text) => {
      const path = `/notes/${platform.name}-${String(text)}`;
      notes.set(path.slice('/notes/'.length), 'old');
      const before = await cached(url, path);
      expect(before.body.text).toBe('old');
      const reply = await write(path);
      expect(reply.status).toBeLessThan(300);
      const after = await get(url, path);
      expect(after.cache).toBe('MISS');
      expect(after.body.text).toBe(text);
    },
  );

  it.each([
    ['throws a 409', 'throw', 409],
    ['sets a 422', '422', 422],
    ['sets a 500', '500', 500],
  ])(
    'a PATCH whose handler %s deletes nothing: the next GET is a HIT',
    async (_, refuse, status) => {
      const path = `/notes/${platform.name}-refused-${refuse}`;
      const before = await cached(url, path);
      const reply = await request(url).patch(`${path}?refuse=${refuse}`).send({ text: 'x' });
      expect(reply.status).toBe(status);
      const after = await get(url, path);
      expect([after.cache, after.body.run]).toEqual(['HIT', before.body.run]);
    },
  );

  it('the Location of a POST that created a resource is invalidated too', async () => {
    const next = `n${created + 1}`;
    const before = await cached(url, `/notes/${next}`);
    expect(before.body.text).toBeNull();
    const post = await request(url).post('/notes').send({ text: 'made' });
    expect(post.headers.location).toBe(`/notes/${next}`);
    const after = await get(url, `/notes/${next}`);
    expect([after.cache, after.body.text]).toEqual(['MISS', 'made']);
  });

  it('a Content-Location on the same host is invalidated; a Location on another host is not', async () => {
    const id = `${platform.name}-appended`;
    const other = `/notes/${platform.name}-elsewhere`;
    const before = await cached(url, `/notes/${id}`);
    const untouched = await cached(url, other);
    const reply = await request(url)
      .post(`/notes/${id}/append`)
      .send({ text: '+1', at: url, copy: `http://elsewhere.example${other}` });
    expect(reply.status).toBe(201);
    const after = await get(url, `/notes/${id}`);
    expect([after.cache, after.body.text]).toEqual(['MISS', '+1']);
    expect(after.body.run).toBeGreaterThan(before.body.run!);
    expect((await get(url, other)).body.run).toBe(untouched.body.run);
  });

  it('a write with Authorization or Cookie invalidates too (its own response is never cached)', async () => {
    const path = `/notes/${platform.name}-private-write`;
    await cached(url, path);
    await request(url).put(path).set('Authorization', 'Bearer a').send({ text: 'mine' });
    expect((await get(url, path)).body.text).toBe('mine');
    await cached(url, path);
    await request(url).put(path).set('Cookie', 'sid=1').send({ text: 'ours' });
    expect((await get(url, path)).body.text).toBe('ours');
  });

  it('across two workers on one Redis: a PUT to one makes the other build again', async () => {
    const namespace = `test:invalidation:${platform.name}:workers:`;
    const [one, two] = [
      await start(platform, {}, new MemoryLogger(), namespace),
      await start(platform, {}, new MemoryLogger(), namespace),
    ];
    const path = `/notes/${platform.name}-fleet`;
    notes.set(`${platform.name}-fleet`, 'old');
    const before = await cached(two, path);
    expect((await get(one, path)).cache).toBe('HIT');
    await request(one).put(path).send({ text: 'new' });
    const after = await get(two, path);
    expect([after.cache, after.body.text]).toEqual(['MISS', 'new']);
    expect(after.body.run).toBeGreaterThan(before.body.run!);
  });
});

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: what a write leaves', (platform) => {
  it('with vary, the variant of the write’s own headers and the one without them are deleted; others stay until they expire', async () => {
    const url = await start(platform, { http: { vary: ['accept-language'] } });
    const path = `/notes/${platform.name}-varied`;
    const fr = { 'accept-language': 'fr' };
    const de = { 'accept-language': 'de' };
    const [frBefore, bareBefore, deBefore] = [
      await cached(url, path, fr),
      await cached(url, path),
      await cached(url, path, de),
    ];
    await request(url).put(path).set(fr).send({ text: 'neu' });
    const [frAfter, bareAfter, deAfter] = [
      await get(url, path, fr),
      await get(url, path),
      await get(url, path, de),
    ];
    expect([frAfter.cache, bareAfter.cache, deAfter.cache]).toEqual(['MISS', 'MISS', 'HIT']);
    expect(frAfter.body.run).toBeGreaterThan(frBefore.body.run!);
    expect(bareAfter.body.run).toBeGreaterThan(bareBefore.body.run!);
    expect(deAfter.body.run).toBe(deBefore.body.run);
  });

  it('a delete the store refuses is logged in the catalog’s words, and the write still succeeds', async () => {
    const entries = new Map<string, string>();
    let refuse = false;
    const store: BufferCacheStore = {
      get: (key) => entries.get(key),
      set: (key, value) => void entries.set(key, value),
      delete: (key) => {
        if (refuse) throw new Error('store is read-only');
        entries.delete(key);
      },
    };
    const logger = new MemoryLogger();
    const url = await start(
      platform,
      {
        cache: store,
        logger: new MemoryLogger(),
        messages: { cache_invalidation_failed: 'Invalidation de URL impossible : ERROR' },
      },
      logger,
    );
    const path = `/notes/${platform.name}-refused-store`;
    const before = await cached(url, path);
    refuse = true;
    const reply = await request(url).put(path).send({ text: 'kept' });
    expect([reply.status, reply.body]).toEqual([200, { id: `${platform.name}-refused-store` }]);
    const lines = logger.at('error');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(`^Invalidation de ${path} impossible : .*store is read-only`),
    );
    // What the store kept is served until it expires.
    expect((await get(url, path)).body.run).toBe(before.body.run);
  });
});
