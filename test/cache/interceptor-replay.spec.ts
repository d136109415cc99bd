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
 * What an answer from the cache carries: the stored status, representation headers and body, an
 * `Age`, and never a header another request's handler set. Through Express and Fastify, on a real
 * redis-server.
 */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let runs = 0;
const LAST_MODIFIED = 'Wed, 21 Oct 2015 07:28:00 GMT';
const EXPIRES = new Date(Date.now() + 3_600_000).toUTCString();

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class ReportsController {
  @Get('report')
  report(@Query('v') v: string, @Res({ passthrough: true }) res: PlatformResponse): string {
    const run = ++runs;
    res.header('Content-Type', 'text/csv; charset=utf-8');
    res.header('Content-Language', 'fr');
    res.header('Content-Disposition', `attachment; filename="report-${v}.csv"`);
    res.header('ETag', `"report-${run}"`);
    res.header('Last-Modified', LAST_MODIFIED);
    res.header('Cache-Control', 'public, max-age=60');
    res.header('Expires', EXPIRES);
    res.header('X-Request-Id', `request-${run}`);
    return `run,${run}`;
  }
}

const KEPT = [
  'content-type',
  'content-language',
  'content-disposition',
  'etag',
  'last-modified',
  'cache-control',
  'expires',
];

let server: RedisServer;
let apps = 0;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await closeApps();
  await server.stop();
});

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: what a hit replays', (platform) => {
  let url: string;
  beforeAll(async () => {
    const namespace = `test:replay:${platform.name}:${++apps}:`;
    ({ url } = await startApp(platform, server, [ReportsController], { namespace }));
  });

  it('the representation headers its handler set, with the body', async () => {
    const miss = await send(url, '/report?v=headers');
    const hit = await send(url, '/report?v=headers');
    expect([miss.cache, hit.cache]).toEqual(['MISS', 'HIT']);
    expect(hit.text).toBe(miss.text);
    const kept = (reply: typeof hit): Record<string, string | undefined> =>
      Object.fromEntries(KEPT.map((name) => [name, reply.headers[name]]));
    expect(kept(hit)).toEqual(kept(miss));
    expect(hit.headers['content-disposition']).toBe('attachment; filename="report-headers.csv"');
    expect(hit.headers.etag).toBe(`"report-${JSON.parse(`"${miss.text.split(',')[1]}"`)}"`);
  });

  it('no header another request set: X-Request-Id is not replayed', async () => {
    const miss = await send(url, '/report?v=request-id');
    const hit = await send(url, '/report?v=request-id');
    expect(miss.headers['x-request-id']).toMatch(/^request-\d+$/);
    expect(hit.headers['x-request-id']).toBeUndefined();
  });

  it('Age: the seconds since the entry was made, on every answer from the cache', async () => {
    const miss = await send(url, '/report?v=age');
    expect(miss.headers.age).toBe('0');
    await sleep(1100);
    const hit = await send(url, '/report?v=age');
    expect(hit.cache).toBe('HIT');
    expect(Number(hit.headers.age)).toBeGreaterThanOrEqual(1);
    expect(Number(hit.headers.age)).toBeLessThan(3);
  });
});
