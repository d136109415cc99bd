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
 * HEAD (RFC 9110 §9.3.2): answered from its URL's GET entry, with the GET's status and headers and
 * no body; a HEAD that finds no entry runs the handler once and stores what a GET would have
 * stored. Through Express and Fastify, on a real redis-server.
 */

let runs = 0;

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class ItemsController {
  @Get('item')
  item(@Query('v') v: string, @Res({ passthrough: true }) res: PlatformResponse): object {
    res.header('ETag', `"item-${v}"`);
    res.header('Content-Language', 'en');
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

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: HEAD', (platform) => {
  let url: string;
  beforeAll(async () => {
    const namespace = `test:head:${platform.name}:${++apps}:`;
    url = (await startApp(platform, server, [ItemsController], { namespace })).url;
  });

  it("a HEAD after a GET is answered from the GET's entry: its headers, no body, no handler run", async () => {
    const get = await send(url, '/item?v=1');
    const before = runs;
    const head = await send(url, '/item?v=1', {}, 'head');
    expect(runs).toBe(before);
    expect([head.status, head.text, head.cache]).toEqual([200, '', 'HIT']);
    for (const name of ['content-type', 'content-language', 'etag']) {
      expect([name, head.headers[name]]).toEqual([name, get.headers[name]]);
    }
    expect(head.headers.age).toBeDefined();
  });

  it('a HEAD that finds no entry runs the handler once, and the next GET is a hit with the body', async () => {
    const before = runs;
    const head = await send(url, '/item?v=2', {}, 'head');
    expect([head.status, head.text, head.cache]).toEqual([200, '', 'MISS']);
    expect(runs).toBe(before + 1);
    const get = await send(url, '/item?v=2');
    expect([get.status, get.cache]).toEqual([200, 'HIT']);
    expect(JSON.parse(get.text)).toEqual({ v: '2', run: before + 1 });
    expect(runs).toBe(before + 1);
  });

  it('a HEAD whose If-None-Match matches the fresh entry gets a 304', async () => {
    await send(url, '/item?v=3');
    const head = await send(url, '/item?v=3', { 'if-none-match': '"item-3"' }, 'head');
    expect([head.status, head.cache]).toEqual([304, 'HIT']);
  });
});
