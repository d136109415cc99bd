import { Controller, Get, Headers, Res, UseInterceptors } from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor } from '../../lib/index.js';
import { sentDuring } from '../support/command-stats.js';
import {
  closeApps,
  PLATFORMS,
  send,
  startApp,
  type PlatformResponse,
  type Reply,
} from '../support/http-apps.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * A response's `Vary` names request headers that key its URL's entries, as Varnish and nginx key
 * them: a request with other values of them gets a variant of its own, and a URL without `Vary`
 * keeps its one-read hit. Through Express and Fastify, on a real redis-server.
 */

let runs = 0;

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class NewsController {
  @Get('news')
  news(
    @Headers('accept-language') language: string | undefined,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): object {
    res.header('Vary', 'Accept-Language');
    return { language: language ?? null, run: ++runs };
  }

  @Get('plain')
  plain(): object {
    return { run: ++runs };
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

const body = (reply: Reply): { language: string | null; run: number } =>
  JSON.parse(reply.text) as { language: string | null; run: number };

describe.each(PLATFORMS)('BufferCacheInterceptor on $name: Vary', (platform) => {
  let url: string;
  beforeAll(async () => {
    const namespace = `test:vary:${platform.name}:${++apps}:`;
    ({ url } = await startApp(platform, server, [NewsController], { namespace }));
  });

  it('an answer in fr is not served to en; each language is then a hit of its own', async () => {
    const fr = await send(url, '/news?v=1', { 'accept-language': 'fr' });
    const en = await send(url, '/news?v=1', { 'accept-language': 'en' });
    const frAgain = await send(url, '/news?v=1', { 'accept-language': 'fr' });
    const enAgain = await send(url, '/news?v=1', { 'accept-language': 'en' });
    expect([fr.cache, en.cache, frAgain.cache, enAgain.cache]).toEqual([
      'MISS',
      'MISS',
      'HIT',
      'HIT',
    ]);
    expect([fr, en, frAgain, enAgain].map((reply) => body(reply).language)).toEqual([
      'fr',
      'en',
      'fr',
      'en',
    ]);
    expect(body(enAgain).run).toBe(body(en).run);
    expect(enAgain.headers.vary).toBe('Accept-Language');
  });

  it('a request without the header is a variant of its own', async () => {
    await send(url, '/news?v=2', { 'accept-language': 'fr' });
    const none = await send(url, '/news?v=2');
    expect([none.cache, body(none).language]).toEqual(['MISS', null]);
    expect(body(await send(url, '/news?v=2')).language).toBeNull();
  });

  it('a hit costs one store read on a URL without Vary, and on the variant its entry was made for; another variant two', async () => {
    await send(url, '/plain');
    await send(url, '/news?v=3', { 'accept-language': 'fr' });
    await send(url, '/news?v=3', { 'accept-language': 'en' });
    const plain = await sentDuring(server, () => send(url, '/plain'));
    const fr = await sentDuring(server, () => send(url, '/news?v=3', { 'accept-language': 'fr' }));
    const en = await sentDuring(server, () => send(url, '/news?v=3', { 'accept-language': 'en' }));
    expect([plain.length, fr.length, en.length]).toEqual([1, 1, 2]);
  });
});
