import { Controller, Get, Query, Res, UseInterceptors } from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor } from '../../lib/index.js';
import {
  closeApps,
  PLATFORMS,
  send,
  startApp,
  type PlatformResponse,
} from '../support/http-apps.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Conditional requests (RFC 9110 §13): an entry keeps its ETag (its handler's, or a weak one made
 * from its body) and Last-Modified, and a request whose `If-None-Match` or `If-Modified-Since`
 * matches a fresh entry gets a 304 with no body, its handler not run. Through Express and
 * Fastify, on a real redis-server.
 */

let runs = 0;
const LAST_MODIFIED = 'Wed, 21 Oct 2015 07:28:00 GMT';

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class FilesController {
  @Get('tagged')
  tagged(@Query('v') v: string, @Res({ passthrough: true }) res: PlatformResponse): object {
    res.header('ETag', `"tagged-${v}"`);
    res.header('Last-Modified', LAST_MODIFIED);
    return { v, run: ++runs };
  }

  @Get('untagged')
  untagged(@Query('v') v: string): object {
    return { v, run: ++runs };
  }
}

let server: RedisServer;
let apps = 0;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await closeApps();
  await server.stop();
});

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: conditional requests', (platform) => {
  let url: string;
  beforeAll(async () => {
    const namespace = `test:conditional:${platform.name}:${++apps}:`;
    const app = await startApp(platform, server, [FilesController], { namespace });
    // Express's own ETags (and its 304s for them) off: what answers is the cache's.
    const express = app.nest.getHttpAdapter().getInstance() as {
      set?: (...args: unknown[]) => void;
    };
    if (platform.name === 'Express') express.set!('etag', false);
    url = app.url;
  });

  it("If-None-Match with the handler's ETag gets a 304, no body, from the entry", async () => {
    const miss = await send(url, '/tagged?v=1');
    const before = runs;
    const held = await send(url, '/tagged?v=1', { 'if-none-match': '"tagged-1"' });
    expect([held.status, held.text, held.cache]).toEqual([304, '', 'HIT']);
    expect(held.headers.etag).toBe('"tagged-1"');
    expect(held.headers.age).toBeDefined();
    expect(runs).toBe(before);
    expect(miss.status).toBe(200);
  });

  it('If-None-Match with another ETag gets the entry, 200', async () => {
    await send(url, '/tagged?v=2');
    const other = await send(url, '/tagged?v=2', { 'if-none-match': '"tagged-1", W/"x"' });
    expect([other.status, other.cache]).toEqual([200, 'HIT']);
    expect(JSON.parse(other.text)).toMatchObject({ v: '2' });
  });

  it('an entry whose handler gave no ETag carries a weak one made from its body, on every answer', async () => {
    const miss = await send(url, '/untagged?v=3');
    const hit = await send(url, '/untagged?v=3');
    expect(miss.headers.etag).toMatch(/^W\/"[\w-]+"$/);
    expect(hit.headers.etag).toBe(miss.headers.etag);
    const held = await send(url, '/untagged?v=3', { 'if-none-match': miss.headers.etag! });
    expect([held.status, held.text]).toEqual([304, '']);
  });

  it('If-Modified-Since at or after its Last-Modified gets a 304; before it, the entry', async () => {
    await send(url, '/tagged?v=4');
    const since = await send(url, '/tagged?v=4', { 'if-modified-since': LAST_MODIFIED });
    const older = await send(url, '/tagged?v=4', {
      'if-modified-since': 'Tue, 20 Oct 2015 07:28:00 GMT',
    });
    expect([since.status, older.status]).toEqual([304, 200]);
  });

  it('If-None-Match wins over If-Modified-Since', async () => {
    await send(url, '/tagged?v=5');
    const reply = await send(url, '/tagged?v=5', {
      'if-none-match': '"another"',
      'if-modified-since': LAST_MODIFIED,
    });
    expect(reply.status).toBe(200);
  });
});
