import { CacheKey } from '@nestjs/cache-manager';
import type { ContextType, INestApplication } from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host.js';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { firstValueFrom, of, type Observable } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BufferCache, BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * Over WebSocket, and for a GraphQL call that is no query (here one whose operation is not
 * known), the interceptor neither caches nor coalesces, and never takes the handler's arguments
 * for an HTTP request, even in an app served by Express or Fastify. On a real redis-server. (A
 * message's reply and a query's field are cached: test/microservices, test/graphql.)
 */

class UsersResolver {
  user(): void {}
  deleteUser(): void {}
}
CacheKey('delete-user')(
  UsersResolver.prototype.deleteUser,
  'deleteUser',
  Object.getOwnPropertyDescriptor(UsersResolver.prototype, 'deleteUser')!,
);

const PLATFORMS = [
  { name: 'Express', adapter: (): ExpressAdapter => new ExpressAdapter() },
  { name: 'Fastify', adapter: (): FastifyAdapter => new FastifyAdapter() },
];

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

const opened: INestApplication[] = [];
afterAll(async () => {
  for (const app of opened) await app.close();
});

/** A resolver's context: the parent is an object with the fields of a GET request. */
function contextOf(type: ContextType, handler: () => void, user: string): ExecutionContextHost {
  const parent = { method: 'GET', url: '/users/1', headers: { host: 'api.example' } };
  const context = new ExecutionContextHost(
    [parent, { id: 1 }, { user }, {}],
    UsersResolver,
    handler,
  );
  context.setType(type);
  return context;
}

describe.each(PLATFORMS)('BufferCacheInterceptor in an app on $name', (platform) => {
  let interceptor: BufferCacheInterceptor;
  let cache: BufferCache;
  beforeAll(async () => {
    const namespace = `test:contexts:${platform.name}:`;
    const ref = await Test.createTestingModule({
      imports: [BufferLockModule.forRoot({ redis: () => server.client(), namespace })],
    }).compile();
    const nest = ref.createNestApplication(platform.adapter(), { logger: false });
    opened.push(nest);
    await nest.init();
    cache = nest.get(BufferCache);
    interceptor = new BufferCacheInterceptor(cache, nest.get(Reflector));
    Object.assign(interceptor, { httpAdapterHost: nest.get(HttpAdapterHost) });
  });

  it.each(['graphql', 'ws'] as ContextType[])(
    'in a %s context, each user gets the answer of its own handler: nothing is cached or shared',
    async (type) => {
      const answers: unknown[] = [];
      for (const user of ['alice', 'bob']) {
        const next = { handle: (): Observable<string> => of(`${user}'s profile`) };
        const context = contextOf(type, UsersResolver.prototype.user, user);
        answers.push(await firstValueFrom(await interceptor.intercept(context, next)));
      }
      expect(answers).toEqual(["alice's profile", "bob's profile"]);
    },
  );

  it.each(['graphql', 'ws'] as ContextType[])(
    'in a %s context, a mutation with @CacheKey runs every time, and nothing is stored under its key',
    async (type) => {
      let deleted = 0;
      const next = { handle: (): Observable<number> => of(++deleted) };
      for (const user of ['alice', 'alice']) {
        const context = contextOf(type, UsersResolver.prototype.deleteUser, user);
        await firstValueFrom(await interceptor.intercept(context, next));
      }
      expect(deleted).toBe(2);
      expect(await cache.get('delete-user')).toBeUndefined();
    },
  );
});
