/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import { Body, Controller, Delete, Get, Injectable, Param, Put, Res } from '@nestjs/common';
import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  BufferLockNotImportedError,
  CacheEvict,
  CachePut,
  Cached,
  ENGLISH_MESSAGES,
} from '../../lib/index.js';
import { METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
let app: INestApplication;
let cache: BufferCache;
let builds = 0;
const stored = new Map<string, { id: string; name: string }>();

@Injectable()
class Reports {
  @Cached((id: string) => `evict:report:${id}`, { ttl: 600 })
  async read(id: string): Promise<{ id: string; name: string; build: number }> {
    return { ...(stored.get(id) ?? { id, name: 'none' }), build: ++builds };
  }

  @CacheEvict((id: string) => [`evict:report:${id}`, 'evict:list'])
  async remove(id: string, fail = false): Promise<string> {
    if (fail) throw new Error('the database refused');
    stored.delete(id);
    return `removed ${id}`;
  }

  @CacheEvict('evict:list')
  clearList(): number {
    return 7;
  }

  @CacheEvict(function (this: Reports) {
    return this.listKey;
  })
  async refreshList(): Promise<void> {}

  readonly listKey = 'evict:list';

  @CacheEvict(() => 42 as unknown as string)
  async badKey(): Promise<void> {}

  @Cached((shop: string, id: string) => `evict:item:${shop}:${id}`, {
    ttl: 600,
    tags: (shop: string) => [`shop:${shop}`],
  })
  async item(shop: string, id: string): Promise<string> {
    return `${shop}/${id}#${++builds}`;
  }

  @CacheEvict([], { tags: (shop: string) => [`shop:${shop}`] })
  async closeShop(shop: string, fail = false): Promise<void> {
    if (fail) throw new Error(`${shop} stays open`);
  }

  @CachePut((id: string) => `evict:item:tagged:${id}`, { tags: ['shop:put'] })
  async putItem(id: string): Promise<string> {
    return `put ${id}`;
  }

  // The Date is built here, and its caller gets the string JSON makes of it, as a hit will: the
  // declared type admits both.
  @CachePut((id: string) => `evict:report:${id}`, { ttl: 600 })
  async save(
    id: string,
    name: string,
    fail = false,
  ): Promise<{ id: string; name: string; at: Date | string }> {
    if (fail) throw new Error('the database refused');
    stored.set(id, { id, name });
    return { id, name, at: new Date(0) };
  }
}

@Controller('reports')
class ReportsController {
  constructor(private readonly reports: Reports) {}

  @Put(':id')
  @CachePut((id: string) => `evict:report:${id}`)
  async update(
    @Param('id') id: string,
    @Body() body: { name: string },
  ): Promise<{ id: string; name: string }> {
    stored.set(id, { id, name: body.name });
    return { id, name: body.name };
  }

  @Delete(':id')
  @CacheEvict((id: string) => `evict:report:${id}`)
  remove(@Param('id') id: string): string {
    stored.delete(id);
    return 'gone';
  }

  @Get(':id')
  read(@Param('id') id: string): Promise<unknown> {
    return this.reports.read(id);
  }
}

beforeAll(async () => {
  server = await startRedis();
  const moduleRef = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: server.url, l1: { maxAge: 60 } })],
    controllers: [ReportsController],
    providers: [Reports],
  }).compile();
  app = moduleRef.createNestApplication({ logger: false });
  await app.init();
  cache = app.get(BufferCache);
});

afterAll(async () => {
  await app?.close();
  await server?.stop();
});

describe('@CacheEvict', () => {
  it('deletes the entries once the method has returned: the next read builds again', async () => {
    const reports = app.get(Reports);
    stored.set('1', { id: '1', name: 'first' });
    const before = builds;
    await reports.read('1');
    await reports.read('1');
    expect(builds).toBe(before + 1);
    await cache.set('evict:list', ['1']);
    expect(await reports.remove('1')).toBe('removed 1');
    expect(await cache.get('evict:list')).toBeUndefined();
    expect(await reports.read('1')).toMatchObject({ name: 'none', build: before + 2 });
  });

  it('deletes nothing when the method throws, and rejects with its error', async () => {
    const reports = app.get(Reports);
    await cache.set('evict:list', ['2']);
    const first = await reports.read('2');
    await expect(reports.remove('2', true)).rejects.toThrow('the database refused');
    expect(await cache.get('evict:list')).toEqual(['2']);
    expect(await reports.read('2')).toEqual(first);
  });

  it('takes a key, keys, or a function of the arguments with this the instance; a sync method becomes async', async () => {
    const reports = app.get(Reports);
    await cache.set('evict:list', [1]);
    const answer = reports.clearList();
    expect(answer).toBeInstanceOf(Promise);
    expect(await answer).toBe(7);
    expect(await cache.get('evict:list')).toBeUndefined();
    await cache.set('evict:list', [2]);
    await reports.refreshList();
    expect(await cache.get('evict:list')).toBeUndefined();
  });

  it('a key function that returns no string rejects in the catalog’s words, after the method ran', async () => {
    await expect(app.get(Reports).badKey()).rejects.toMatchObject({ code: 'lock_key_invalid' });
  });

  it('keeps the route’s metadata: DELETE /reports/:id evicts the entry the GET built', async () => {
    stored.set('9', { id: '9', name: 'nine' });
    const first = await request(app.getHttpServer()).get('/reports/9');
    expect(first.body).toMatchObject({ name: 'nine' });
    const again = await request(app.getHttpServer()).get('/reports/9');
    expect(again.body.build).toBe(first.body.build);
    expect((await request(app.getHttpServer()).delete('/reports/9')).text).toBe('gone');
    const after = await request(app.getHttpServer()).get('/reports/9');
    expect(after.body).toMatchObject({ name: 'none' });
    expect(after.body.build).toBeGreaterThan(first.body.build);
    const method = ReportsController.prototype.remove;
    expect(Reflect.getMetadata(PATH_METADATA, method)).toBe(':id');
    expect(Reflect.getMetadata(METHOD_METADATA, method)).toBe(3); // RequestMethod.DELETE
  });

  it('is refused when the class is defined, in the catalog’s words', () => {
    for (const keys of ['', [], [''], ['a', 7], 7, null]) {
      expect(() => CacheEvict(keys as never)).toThrow(BufferLockConfigError);
      expect(() => CacheEvict(keys as never)).toThrow(ENGLISH_MESSAGES.cache_evict_key_invalid);
    }
  });
});

describe('tags on decorators', () => {
  it('@Cached tags from the arguments; @CacheEvict with tags makes those entries a miss, only on success', async () => {
    const reports = app.get(Reports);
    const a1 = await reports.item('a', '1');
    const a2 = await reports.item('a', '2');
    const b1 = await reports.item('b', '1');
    expect(await reports.item('a', '1')).toBe(a1);
    await expect(reports.closeShop('a', true)).rejects.toThrow('a stays open');
    expect(await reports.item('a', '1')).toBe(a1);
    await reports.closeShop('a');
    expect(await reports.item('a', '1')).not.toBe(a1);
    expect(await reports.item('a', '2')).not.toBe(a2);
    expect(await reports.item('b', '1')).toBe(b1);
  });

  it('@CachePut writes its entry with its tags', async () => {
    const reports = app.get(Reports);
    await reports.putItem('7');
    expect(await cache.get('evict:item:tagged:7')).toBe('put 7');
    await cache.deleteByTag('shop:put');
    expect(await cache.get('evict:item:tagged:7')).toBeUndefined();
  });

  it('tags that are no array of strings, nor a function, are refused when the class is defined', () => {
    expect(() => Cached('k', { tags: 'shop' as never })).toThrow(
      ENGLISH_MESSAGES.cache_tags_invalid,
    );
    expect(() => CachePut('k', { tags: [''] })).toThrow(ENGLISH_MESSAGES.cache_tags_invalid);
    expect(() => CacheEvict('k', { tags: 3 as never })).toThrow(
      ENGLISH_MESSAGES.cache_tags_invalid,
    );
    expect(() => CacheEvict('k', { tag: ['x'] } as never)).toThrow(BufferLockConfigError);
    expect(() => CacheEvict('k', 'tags' as never)).toThrow(
      ENGLISH_MESSAGES.cache_evict_options_invalid,
    );
  });
});

describe('@CachePut', () => {
  it('runs the method every call and stores its value as the entry, as JSON gives it back', async () => {
    const reports = app.get(Reports);
    const saved = await reports.save('3', 'third');
    // What a hit will return: the Date as its ISO string.
    expect(saved).toEqual({ id: '3', name: 'third', at: new Date(0).toISOString() });
    expect(await cache.get('evict:report:3')).toEqual(saved);
    const before = builds;
    expect(await reports.read('3')).toEqual(saved);
    expect(builds).toBe(before);
    await reports.save('3', 'renamed');
    expect(await reports.read('3')).toMatchObject({ name: 'renamed' });
    expect(builds).toBe(before);
  });

  it('stores nothing when the method throws', async () => {
    const reports = app.get(Reports);
    await reports.save('4', 'kept');
    await expect(reports.save('4', 'lost', true)).rejects.toThrow('the database refused');
    expect(await cache.get('evict:report:4')).toMatchObject({ name: 'kept' });
  });

  it('on a route: PUT /reports/:id writes the entry the GET then serves', async () => {
    const put = await request(app.getHttpServer()).put('/reports/5').send({ name: 'five' });
    expect(put.body).toEqual({ id: '5', name: 'five' });
    const before = builds;
    expect((await request(app.getHttpServer()).get('/reports/5')).body).toEqual({
      id: '5',
      name: 'five',
    });
    expect(builds).toBe(before);
  });

  it('is refused when the class is defined, in the catalog’s words', () => {
    expect(() => CachePut('' as never)).toThrow(ENGLISH_MESSAGES.cache_put_key_invalid);
    expect(() => CachePut('k', 'ttl' as never)).toThrow(ENGLISH_MESSAGES.cache_put_options_invalid);
    expect(() => CachePut('k', { tll: 1 } as never)).toThrow(BufferLockConfigError);
    expect(() => {
      class Raw {
        // @ts-expect-error -- the types refuse it too: it returns no Promise
        @CachePut('x')
        raw(@Res() _res: unknown): void {}
      }
      return Raw;
    }).toThrow('@CachePut on Raw.raw cannot store its result as one entry: it takes @Res()');
  });
});

it('a @CacheEvict or @CachePut method on an instance Nest did not make rejects with BufferLockNotImportedError', async () => {
  const plain = new Reports();
  await expect(plain.remove('1')).rejects.toBeInstanceOf(BufferLockNotImportedError);
  await expect(plain.save('1', 'x')).rejects.toThrow(
    'Reports.save uses @CachePut, but BufferLockModule is not visible to its module',
  );
});
