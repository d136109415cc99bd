import type { INestApplication } from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { createServer, type Server, type Socket } from 'node:net';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockModule,
  connectFailFast,
  LockError,
  RedisLockService,
} from '../../lib/index.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { freePort, startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * A connection that fails says why (refused, authentication, no answer, unknown host) and where
 * (host and port, never the password); a module whose Redis cannot be reached at startup says so
 * once, as a warning, and the app boots and fails open all the same.
 */

const PASSWORD = 'pa55:w/rd@the-secret';
let server: RedisServer;
let silent: Server;
let silentPort: number;
const sockets: Socket[] = [];
beforeAll(async () => {
  server = await startRedis();
  await server.client().config('SET', 'requirepass', 'the-right-password');
  // Takes connections and never answers: a partitioned or frozen Redis.
  silent = createServer((socket) => sockets.push(socket));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  silentPort = (silent.address() as { port: number }).port;
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  silent.close();
  await server.stop();
});

const shows = (error: unknown): string => `${inspect(error, { depth: 20 })} ${String(error)}`;

async function failure(url: string): Promise<LockError> {
  const error: unknown = await connectFailFast(url).then(
    (client) => (client.disconnect(), undefined),
    (refused: unknown) => refused,
  );
  expect(error).toBeInstanceOf(LockError);
  return error as LockError;
}

describe('connectFailFast says why and where a connection failed', () => {
  it('a refused port', async () => {
    const port = await freePort();
    const error = await failure(`redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}`);
    expect([error.code, error.message]).toEqual([
      'redis_unreachable',
      `Redis at 127.0.0.1:${port} could not be reached: the connection was refused`,
    ]);
    expect(shows(error)).not.toContain('pa55');
  });

  it('a wrong password', async () => {
    const error = await failure(
      `redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:${server.port}`,
    );
    expect(error.message).toBe(
      `Redis at 127.0.0.1:${server.port} could not be reached: authentication failed; check the password and the user`,
    );
    expect(shows(error)).not.toContain('pa55');
    expect(shows(error)).not.toContain(encodeURIComponent(PASSWORD));
  });

  it('no password where one is required', async () => {
    const error = await failure(`redis://127.0.0.1:${server.port}`);
    expect(error.message).toContain('authentication failed');
  });

  it('a host that takes the connection and never answers', async () => {
    const error = await failure(`redis://127.0.0.1:${silentPort}`);
    expect(error.message).toBe(
      `Redis at 127.0.0.1:${silentPort} could not be reached: it did not answer in time`,
    );
  });

  it('a host name that does not resolve', async () => {
    const error = await failure('redis://no-such-host.invalid:6379');
    expect(error.message).toBe(
      'Redis at no-such-host.invalid:6379 could not be reached: its host name is not known',
    );
  });
});

async function boot(redis: string, logger: MemoryLogger): Promise<INestApplication> {
  const ref = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis, logger, namespace: 'unreachable:' })],
  }).compile();
  const app = ref.createNestApplication({ logger: false });
  await app.init();
  return app;
}

describe('a module whose Redis cannot be reached at startup', () => {
  it('boots, warns once with the cause, and fails open', async () => {
    const port = await freePort();
    const logger = new MemoryLogger();
    const app = await boot(`redis://:${encodeURIComponent(PASSWORD)}@127.0.0.1:${port}`, logger);
    expect(logger.at('warn')).toEqual([
      `Redis could not be reached at startup: Redis at 127.0.0.1:${port} could not be reached: the connection was refused. Calls go on as onRedisError says until it answers (onRedisError: "proceed")`,
    ]);
    let builds = 0;
    const cache = app.get(BufferCache);
    expect(await cache.getOrSet('report', () => ++builds)).toBe(1);
    expect(JSON.stringify(logger.lines)).not.toContain('pa55');
    await app.close();
  });

  it('says nothing when Redis answers, and the lock works at once', async () => {
    const logger = new MemoryLogger();
    const app = await boot(`redis://:the-right-password@127.0.0.1:${server.port}`, logger);
    expect(logger.at('warn')).toEqual([]);
    const lock = app.get(RedisLockService);
    const [guard, error] = await lock.acquire('report');
    expect(error).toBeUndefined();
    expect(await lock.release(guard!)).toEqual([true, undefined]);
    await app.close();
  });
});
