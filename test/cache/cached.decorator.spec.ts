/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import {
  Controller,
  Get,
  Injectable,
  Next,
  Param,
  Res,
  UseGuards,
  type CanActivate,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
// Observable is imported as a value: design:returntype then names it.
import { Observable, of } from 'rxjs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusedWith } from '../support/refused.js';
import {
  BufferLockConfigError,
  BufferLockModule,
  BufferLockNotImportedError,
  Cached,
  ENGLISH_MESSAGES,
} from '../../lib/index.js';
import { commandStats } from '../support/command-stats.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

let server: RedisServer;
let admin: Redis;
let app: INestApplication;
let builds = 0;
let guarded = 0;

class CountingGuard implements CanActivate {
  canActivate(): boolean {
    guarded++;
    return true;
  }
}

@Injectable()
class Reports {
  @Cached((id: string) => `cached:report:${id}`, { ttl: 60 })
  async build(id: string): Promise<{ id: string; build: number }> {
    await new Promise((resolve) => setTimeout(resolve, 30));
    return { id, build: ++builds };
  }
}

@Controller('reports')
class ReportsController {
  constructor(private readonly reports: Reports) {}

  // @Cached below @Get and above @UseGuards: every route decorator keeps working.
  @Get(':id')
  @Cached(function (this: ReportsController, id: string) {
    return `cached:route:${id}`;
  })
  @UseGuards(CountingGuard)
  async route(@Param('id') id: string): Promise<{ id: string; build: number }> {
    return { id, build: ++builds };
  }

  @Get(':id/via-provider')
  viaProvider(@Param('id') id: string): Promise<{ id: string; build: number }> {
    return this.reports.build(id);
  }
}

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  const ref = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: server.url, namespace: 'test:cached:' })],
    controllers: [ReportsController],
    providers: [Reports],
  }).compile();
  app = ref.createNestApplication({ logger: false });
  await app.init();
});
afterAll(async () => {
  await app.close();
  await server.stop();
});

describe('@Cached on a controller handler', () => {
  it('builds once for 30 concurrent requests, then serves hits; route metadata and guards still apply', async () => {
    builds = 0;
    guarded = 0;
    const answers = await Promise.all(
      Array.from({ length: 30 }, () => request(app.getHttpServer()).get('/reports/7')),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(30).fill(200));
    expect(new Set(answers.map((a) => a.body.build))).toEqual(new Set([1]));
    expect(builds).toBe(1);
    expect(guarded).toBe(30);
  });

  it('a hit runs no lock command: one read of the store', async () => {
    await request(app.getHttpServer()).get('/reports/8');
    const before = await commandStats(admin);
    await request(app.getHttpServer()).get('/reports/8').expect(200);
    const after = await commandStats(admin);
    const ran = (name: string): number => (after.get(name) ?? 0) - (before.get(name) ?? 0);
    expect(ran('evalsha')).toBe(1);
    expect(ran('set')).toBe(0);
    expect(ran('del')).toBe(0);
  });
});

describe('@Cached on a provider method', () => {
  it('keys by the arguments: one build per id, shared by concurrent callers', async () => {
    builds = 0;
    const answers = await Promise.all(
      ['a', 'a', 'b', 'b', 'a'].map((id) =>
        request(app.getHttpServer()).get(`/reports/${id}/via-provider`),
      ),
    );
    expect(answers.map((a) => a.body.id)).toEqual(['a', 'a', 'b', 'b', 'a']);
    expect(builds).toBe(2);
  });
});

/** The configuration error `define` throws. */
const refusal = (define: () => unknown): BufferLockConfigError => {
  let error: unknown;
  try {
    define();
  } catch (e) {
    error = e;
  }
  expect(error).toBeInstanceOf(BufferLockConfigError);
  return error as BufferLockConfigError;
};

describe('@Cached refuses, when the class is defined, what is not one value', () => {
  it('a handler that takes @Res()', () => {
    const error = refusal(() => {
      @Controller()
      class Raw {
        @Get()
        // @ts-expect-error -- the types refuse it too: it returns no Promise
        @Cached('raw')
        answer(@Res() res: { send(body: string): void }): void {
          res.send('x');
        }
      }
      return Raw;
    });
    expect(error.code).toBe('cached_unsupported');
    expect(error.message).toBe(
      ENGLISH_MESSAGES.cached_unsupported
        .replace('CLASS', 'Raw')
        .replace('METHOD', 'answer')
        .replace('WHAT', 'it takes @Res()'),
    );
  });

  it('a handler that takes @Next()', () => {
    const error = refusal(() => {
      @Controller()
      class Chained {
        @Get()
        // @ts-expect-error -- the types refuse it too: it returns no Promise
        @Cached('next')
        answer(@Next() next: () => void): void {
          next();
        }
      }
      return Chained;
    });
    expect(error.message).toContain('it takes @Next()');
  });

  it('a method declared to return an Observable', () => {
    const error = refusal(() => {
      class Streams {
        // @ts-expect-error -- the types refuse it too: @Cached takes a Promise
        @Cached('stream')
        prices(): Observable<number> {
          return of(1);
        }
      }
      return Streams;
    });
    expect(error.message).toContain('it returns an Observable');
  });

  it.each([
    ["'skip'", 'skip'],
    ['null', null],
    ['60', 60],
    ['an array', [{ ttl: 60 }]],
    ['a function', () => ({ ttl: 60 })],
  ])('options that are no object: %s', (_name, options) => {
    const error = refusal(() => Cached('k', options as never));
    expect(error.code).toBe('cached_options_invalid');
    expect(error.message).toEqual(
      refusedWith(
        '@Cached options must be an object of cache settings (ttl, grace, timeout, lockTtl, lockTimeout, hardTimeout, maxValueBytes, earlyRefresh, l1)',
      ),
    );
  });

  it('a bad key or bad options', () => {
    expect(refusal(() => Cached('')).code).toBe('cached_key_invalid');
    expect(refusal(() => Cached('k', { grace: -1 } as never)).code).toBe('cache_grace_invalid');
  });
});

it('a @Cached method on an instance Nest did not make rejects with BufferLockNotImportedError', async () => {
  await expect(new Reports().build('x')).rejects.toBeInstanceOf(BufferLockNotImportedError);
});
