import {
  Controller,
  Get,
  Injectable,
  UseGuards,
  UseInterceptors,
  type CanActivate,
} from '@nestjs/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCacheInterceptor, Cached, SingleFlight } from '../../lib/index.js';
import { closeApps, PLATFORMS, send, startApp, type Reply } from '../support/http-apps.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Each way in (`@Cached`, `BufferCacheInterceptor`, `@SingleFlight` with `share`) on each of
 * Nest's HTTP platforms, across two workers (two apps on one Redis): concurrent requests for one
 * key, spread over both, run the handler once in all, and each gets its answer.
 */

/** What every app of a run shares: the requests that reached a handler's guard, and the runs. */
const counts = { arrived: 0, runs: 0 };
let gate = deferred();

@Injectable()
class Arrivals implements CanActivate {
  canActivate(): boolean {
    counts.arrived++;
    return true;
  }
}

async function build(): Promise<{ run: number }> {
  const run = ++counts.runs;
  await gate.promise;
  return { run };
}

@Controller('ways')
@UseGuards(Arrivals)
class WaysController {
  @Get('cached')
  @Cached('ways:cached', { ttl: 60 })
  cached(): Promise<{ run: number }> {
    return build();
  }

  @Get('intercepted')
  @UseInterceptors(BufferCacheInterceptor)
  intercepted(): Promise<{ run: number }> {
    return build();
  }

  @Get('flight')
  @SingleFlight('ways:flight', { share: true })
  flight(): Promise<{ run: number }> {
    return build();
  }
}

const REQUESTS = 10;
/** The name clients reach the fleet by: the interceptor's key has the Host, as a proxy's does. */
const HOST = { host: 'shop.example' };

describe.each(PLATFORMS)('every way in on $name, across two workers', (platform) => {
  let server: RedisServer;
  let urls: string[];

  beforeAll(async () => {
    server = await startRedis();
    const namespace = `test:ways:${platform.name}:`;
    urls = [];
    for (let worker = 0; worker < 2; worker++) {
      const options = { namespace, cacheDefaults: { ttl: 60 } };
      urls.push((await startApp(platform, server, [WaysController], options)).url);
    }
  });
  afterAll(async () => {
    await closeApps();
    await server?.stop();
  });

  /** REQUESTS concurrent GETs of `path`, alternating between the workers, held in the handler until all arrived. */
  async function stampede(path: string): Promise<Reply[]> {
    counts.arrived = 0;
    counts.runs = 0;
    gate = deferred();
    const replies = Promise.all(
      Array.from({ length: REQUESTS }, (_, i) => send(urls[i % 2]!, path, HOST)),
    );
    await until(() => counts.arrived === REQUESTS);
    gate.resolve();
    return replies;
  }

  it.each(['cached', 'intercepted', 'flight'])(
    'GET /ways/%s: one handler run for 10 concurrent requests on two workers, the same body for all',
    async (way) => {
      const replies = await stampede(`/ways/${way}`);
      expect(counts.runs).toBe(1);
      expect(replies.map((reply) => reply.status)).toEqual(Array(REQUESTS).fill(200));
      expect(new Set(replies.map((reply) => reply.text))).toEqual(new Set(['{"run":1}']));
    },
  );

  it.each(['cached', 'intercepted'])(
    'GET /ways/%s once built: a hit on either worker, with no handler run',
    async (way) => {
      const runs = counts.runs;
      const hits = await Promise.all(urls.map((url) => send(url, `/ways/${way}`, HOST)));
      expect(counts.runs).toBe(runs);
      expect(hits.map((reply) => reply.text)).toEqual(['{"run":1}', '{"run":1}']);
      if (way === 'intercepted') expect(hits.map((reply) => reply.cache)).toEqual(['HIT', 'HIT']);
    },
  );
});
