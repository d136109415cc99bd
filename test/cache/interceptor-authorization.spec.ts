import { Controller, Get, Headers, Query, Res, UseInterceptors } from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor } from '../../lib/index.js';
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
 * A request with `Authorization` and a shared cache (RFC 9111 §3.5): it is answered from an entry,
 * and its response stored, only when the response says `public`, `s-maxage` or `must-revalidate`;
 * a request with `Cookie` stays private. Through Express and Fastify, on a real redis-server.
 */

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

let runs = 0;
let gate: Promise<void> = Promise.resolve();
let open = (): void => {};

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class DocumentsController {
  @Get('doc')
  async doc(
    @Query('cc') cacheControl: string | undefined,
    @Headers('authorization') auth: string | undefined,
    @Res({ passthrough: true }) res: PlatformResponse,
  ): Promise<object> {
    await gate;
    if (cacheControl) res.header('Cache-Control', cacheControl);
    return { auth: auth ?? null, run: ++runs };
  }
}

let server: RedisServer;
let url: string;
let apps = 0;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(async () => {
  await closeApps();
  await server.stop();
});

const run = (reply: Reply): number => (JSON.parse(reply.text) as { run: number }).run;
const auth = (reply: Reply): unknown => (JSON.parse(reply.text) as { auth: unknown }).auth;

describe.each(PLATFORMS)(
  'BufferCacheInterceptor on $name: a request with Authorization',
  (platform) => {
    beforeAll(async () => {
      const namespace = `test:authorization:${platform.name}:${++apps}:`;
      ({ url } = await startApp(platform, server, [DocumentsController], { namespace }));
    });

    it.each(['public', 'public, max-age=60', 's-maxage=60', 'must-revalidate', 'Public'])(
      'its response with Cache-Control: %s is stored, and answers requests with and without Authorization',
      async (cacheControl) => {
        const path = `/doc?cc=${encodeURIComponent(cacheControl)}`;
        const alice = await send(url, path, { authorization: 'Bearer alice' });
        const bob = await send(url, path, { authorization: 'Bearer bob' });
        const anonymous = await send(url, path);
        expect([alice.cache, bob.cache, anonymous.cache]).toEqual(['MISS', 'HIT', 'HIT']);
        expect(bob.text).toBe(alice.text);
        expect(anonymous.text).toBe(alice.text);
      },
    );

    it.each(['max-age=60', ''])(
      'its response with Cache-Control: "%s" is not stored: the next request runs its own handler',
      async (cacheControl) => {
        const path = `/doc?private=${encodeURIComponent(cacheControl)}&cc=${encodeURIComponent(cacheControl)}`;
        const alice = await send(url, path, { authorization: 'Bearer alice' });
        const anonymous = await send(url, path);
        const bob = await send(url, path, { authorization: 'Bearer bob' });
        expect([alice.cache, anonymous.cache]).toEqual(['MISS', 'MISS']);
        expect([auth(alice), auth(anonymous), auth(bob)]).toEqual([
          'Bearer alice',
          null,
          'Bearer bob',
        ]);
      },
    );

    it("an entry stored from an anonymous request's response that does not say public is not served to it", async () => {
      const anonymous = await send(url, '/doc?cc=max-age%3D60&from=anonymous');
      const alice = await send(url, '/doc?cc=max-age%3D60&from=anonymous', {
        authorization: 'Bearer alice',
      });
      const again = await send(url, '/doc?cc=max-age%3D60&from=anonymous');
      expect([anonymous.cache, alice.cache, again.cache]).toEqual(['MISS', 'MISS', 'HIT']);
      expect(run(alice)).toBe(run(anonymous) + 1);
      expect(auth(alice)).toBe('Bearer alice');
      // What alice's handler made was not stored over the entry.
      expect(again.text).toBe(anonymous.text);
    });

    it("an entry stored from an anonymous request's public response is served to it without running its handler", async () => {
      const anonymous = await send(url, '/doc?cc=public&from=anonymous');
      const before = runs;
      const alice = await send(url, '/doc?cc=public&from=anonymous', {
        authorization: 'Bearer alice',
      });
      expect([anonymous.cache, alice.cache]).toEqual(['MISS', 'HIT']);
      expect(alice.text).toBe(anonymous.text);
      expect(runs).toBe(before);
    });

    it('an anonymous request that waited on its build of a response not marked shared runs its own handler', async () => {
      gate = new Promise((resolve) => (open = resolve));
      const alice = send(url, '/doc?cc=max-age%3D60&race', { authorization: 'Bearer alice' });
      await sleep(100);
      const anonymous = send(url, '/doc?cc=max-age%3D60&race');
      await sleep(100);
      open();
      const replies = await Promise.all([alice, anonymous]);
      expect(replies.map(auth)).toEqual(['Bearer alice', null]);
      expect(replies.map((reply) => reply.cache)).toEqual(['MISS', 'MISS']);
    });

    it('a request with Cookie is still private, on a public route: its handler runs, with no X-Cache', async () => {
      await send(url, '/doc?cc=public&cookie');
      const before = runs;
      const cookie = await send(url, '/doc?cc=public&cookie', { cookie: 'sid=alice' });
      expect(cookie.cache).toBeUndefined();
      expect(runs).toBe(before + 1);
    });
  },
);
