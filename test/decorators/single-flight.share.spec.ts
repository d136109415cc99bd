/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import {
  Controller,
  Get,
  Injectable,
  Param,
  Res,
  StreamableFile,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  BufferLockModule,
  ENGLISH_MESSAGES,
  RedisLockService,
  SingleFlight,
  type BufferLockOptions,
} from '../../lib/index.js';
import { releaseChannel } from '../../lib/redis/keys.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import { deferred, MemoryLogger, until } from '../support/nest-helpers.js';

/**
 * `@SingleFlight` through Nest: `share`, `onRedisError`, `SingleFlight.signal()` / `.fence()`, the
 * pub/sub wait strategy as the module's default. Two Nest apps on one Redis stand for two workers.
 */

const NS = 'test:share:';
let server: RedisServer;
let admin: Redis;
const gate = { current: deferred() };
let runs = 0;
let arrivals = 0;

@Injectable()
class Reports {
  @SingleFlight((id: string) => `report:${id}`, { share: true })
  async build(id: string): Promise<{ id: string; pid: string; run: number }> {
    runs++;
    await gate.current.promise;
    return { id, pid: 'leader', run: runs };
  }

  @SingleFlight('fenced')
  async fenced(): Promise<{ fence: number | undefined; aborted: boolean }> {
    return { fence: SingleFlight.fence(), aborted: SingleFlight.signal().aborted };
  }

  @SingleFlight('strict', { onRedisError: 'throw' })
  async strict(): Promise<string> {
    return 'ran';
  }
}

@Controller('r')
class ReportsController {
  constructor(private readonly reports: Reports) {}

  @Get(':id')
  @SingleFlight(
    (id: string) => {
      arrivals++; // the key function runs for every call, leader or not
      return `http:${id}`;
    },
    { share: true },
  )
  async report(@Param('id') id: string): Promise<{ id: string; run: number }> {
    runs++;
    await gate.current.promise;
    return { id, run: runs };
  }

  @Get('strict/now')
  strict(): Promise<string> {
    return this.reports.strict();
  }

  /** share comes from the module; a @Res() handler is refused at its first call. */
  @Get('raw/res')
  @SingleFlight('raw')
  raw(@Res() res: { send(body: string): void }): void {
    res.send('raw');
  }
}

async function app(options: Partial<BufferLockOptions> = {}): Promise<INestApplication> {
  const ref = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({
        redis: () => server.client(),
        namespace: NS,
        fencing: true,
        logger: new MemoryLogger(),
        ...options,
      }),
    ],
    controllers: [ReportsController],
    providers: [Reports],
  }).compile();
  const nest = ref.createNestApplication({ logger: false });
  await nest.init();
  return nest;
}

let one: INestApplication;
let two: INestApplication;

/** Resolves once a worker listens for the release of `cacheKey` (it found the lock busy). */
async function waitingOn(cacheKey: string): Promise<void> {
  const channel = releaseChannel(one.get(RedisLockService).redisKey(cacheKey));
  await until(async () => {
    const [, count] = (await admin.call('PUBSUB', 'SHARDNUMSUB', channel)) as [string, number];
    return count > 0;
  });
}
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  one = await app();
  two = await app();
});
afterAll(async () => {
  await one?.close();
  await two?.close();
  await server.stop();
});

describe('share: true across two apps (workers)', () => {
  it('the method runs once; the other worker returns the leader’s value', async () => {
    runs = 0;
    gate.current = deferred();
    const first = one.get(Reports).build('7');
    await until(() => runs === 1);
    const second = two.get(Reports).build('7');
    await waitingOn('report:7'); // the other worker found the lock busy and listens for its release
    gate.current.resolve();
    const [a, b] = await Promise.all([first, second]);
    expect(runs).toBe(1);
    expect(b).toEqual(a);
  });

  it('over HTTP: 20 requests on each app, one run, the same body everywhere', async () => {
    runs = 0;
    arrivals = 0;
    gate.current = deferred();
    const replies = Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        request((i % 2 ? two : one).getHttpServer()).get('/r/cold'),
      ),
    );
    await until(() => arrivals === 40); // every request joined a flight...
    await waitingOn('http:cold'); // ...and the other worker waits for the release
    gate.current.resolve();
    const bodies = (await replies).map((reply) => reply.text);
    expect(runs).toBe(1);
    expect(new Set(bodies)).toEqual(new Set(['{"id":"cold","run":1}']));
  });
});

/** Defines a class with a @Res() handler and share: true. */
function defineResHandler(): unknown {
  class Bad {
    @SingleFlight('bad', { share: true })
    handler(@Res() res: unknown): unknown {
      return res;
    }
  }
  return Bad;
}

describe('share: unshareable handlers are refused', () => {
  it('@Res() with share: true on the decorator: when the class is defined', () => {
    const error: unknown = (() => {
      try {
        defineResHandler();
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).message).toBe(
      ENGLISH_MESSAGES.single_flight_share_response
        .replace('CLASS', 'Bad')
        .replace('METHOD', 'handler')
        .replace('WHAT', 'it takes @Res()'),
    );
  });

  it('a declared StreamableFile return type with share: true: when the class is defined', () => {
    // (An async method declares Promise; its StreamableFile is refused at the first call instead.)
    expect(() => {
      class File {
        // @ts-expect-error -- refused by the types too: a StreamableFile does not survive the serializer
        @SingleFlight('file', { share: true })
        download(): StreamableFile {
          return new StreamableFile(Buffer.from('x'));
        }
      }
      return File;
    }).toThrow(ENGLISH_MESSAGES.single_flight_share_response.split('CLASS')[0]!);
  });

  it('share: true from the module and a @Res() handler: a clear error at the first call', async () => {
    const shared = await app({ share: true });
    try {
      const handler = shared.get(ReportsController);
      const error: unknown = await (
        handler.raw({ send() {} }) as unknown as Promise<unknown>
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BufferLockConfigError);
      expect((error as BufferLockConfigError).code).toBe('single_flight_share_response');
    } finally {
      await shared.close();
    }
  });
});

describe('SingleFlight.signal() and SingleFlight.fence() inside the method', () => {
  it('the fence grows with every holder, across apps; the signal is live and not aborted', async () => {
    const seen: number[] = [];
    for (let i = 0; i < 3; i++) {
      for (const nest of [one, two]) {
        const { fence, aborted } = await nest.get(Reports).fenced();
        expect(aborted).toBe(false);
        seen.push(fence!);
      }
    }
    expect(seen.every((f, i) => i === 0 || f > seen[i - 1]!)).toBe(true);
  });

  it('outside a method: a signal that never aborts and no fence', () => {
    expect(SingleFlight.signal().aborted).toBe(false);
    expect(SingleFlight.fence()).toBeUndefined();
  });
});

describe("onRedisError: 'throw' over HTTP", () => {
  it('answers 503 with the catalog text when Redis cannot be asked', async () => {
    const dead = await app({
      redis: () => {
        throw new Error('ECONNREFUSED');
      },
      circuitBreaker: false,
    });
    try {
      const reply = await request(dead.getHttpServer()).get('/r/strict/now');
      expect(reply.status).toBe(503);
      expect(reply.body).toMatchObject({ message: ENGLISH_MESSAGES.redis_unavailable });
    } finally {
      await dead.close();
    }
  });
});

describe('wake on release is the module’s default wait strategy', () => {
  it('one subscriber connection for all waiting keys, dropped when nothing waits', async () => {
    const nest = await app();
    try {
      const lock = nest.get(RedisLockService);
      const subscribers = async (): Promise<string[]> =>
        String(await admin.client('LIST'))
          .split('\n')
          .filter((line) => /ssub=[1-9]/.test(line));
      // Subscriptions of the tests before end within a second of their last waiter.
      await until(async () => (await subscribers()).length === 0);
      // Another worker holds five keys; this app's callers wait on all five.
      const held = await Promise.all(
        [0, 1, 2, 3, 4].map(async (i) => (await lock.acquire(`report:w${i}`))[0]!),
      );
      gate.current = deferred();
      gate.current.resolve();
      const waiting = Promise.all([0, 1, 2, 3, 4].map((i) => nest.get(Reports).build(`w${i}`)));
      await until(async () => (await subscribers()).some((line) => /ssub=5/.test(line)));
      expect(await subscribers()).toHaveLength(1);
      await Promise.all(held.map((guard) => lock.release(guard)));
      expect((await waiting).map((report) => report.id)).toEqual(['w0', 'w1', 'w2', 'w3', 'w4']);
      await until(async () => (await subscribers()).length === 0);
    } finally {
      await nest.close();
    }
  });
});
