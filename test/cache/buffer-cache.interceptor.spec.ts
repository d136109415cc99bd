import { CacheInterceptor, CacheKey, CacheModule, CacheTTL } from '@nestjs/cache-manager';
import {
  Controller,
  Get,
  Headers,
  Injectable,
  NotFoundException,
  Post,
  Query,
  StreamableFile,
  UseInterceptors,
  type DynamicModule,
  type ExecutionContext,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { APP_INTERCEPTOR, HttpAdapterHost, Reflector } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import request from 'supertest';
import { firstValueFrom, of, type Observable } from 'rxjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferCacheInterceptor,
  BufferLockModule,
  RedisLockService,
  type BufferLockOptions,
} from '../../lib/index.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The same routes under either interceptor; each route counts its runs. */
@Controller('items')
class ItemsController {
  readonly counts = new Map<string, number>();

  runs(route: string): number {
    return this.counts.get(route) ?? 0;
  }

  private run(route: string): number {
    const count = this.runs(route) + 1;
    this.counts.set(route, count);
    return count;
  }

  @Get()
  object(@Query('n') n: string): object {
    return { n, run: this.run(`object:${n}`), tags: ['a', 'b'], nested: { ok: true, none: null } };
  }

  @Get('text')
  text(): string {
    return `plain text, run ${this.run('text')}`;
  }

  @Get('list')
  list(): number[] {
    return [this.run('list'), 2, 3];
  }

  @Get('custom')
  @CacheKey('custom')
  custom(@Query('x') x: string): object {
    return { x, run: this.run('custom') };
  }

  @Get('short')
  @CacheTTL(100)
  short(): object {
    return { run: this.run('short') };
  }

  @Get('computed-ttl')
  @CacheTTL((context: ExecutionContext) => (context.getHandler().name === 'computed' ? 100 : 0))
  computed(): object {
    return { run: this.run('computed') };
  }

  @Post()
  create(): object {
    return { created: this.run('create') };
  }

  @Get('broken')
  broken(): never {
    this.run('broken');
    throw new NotFoundException('no such report');
  }

  @Get('file')
  file(): StreamableFile {
    this.run('file');
    return new StreamableFile(Buffer.from('file body'));
  }

  @Get('slow')
  async slow(@Query('n') n: string): Promise<object> {
    const run = this.run(`slow:${n}`);
    // Long enough that all of a test's concurrent requests arrive while it runs, on a busy machine.
    await sleep(600);
    return { n, run };
  }

  @Get('versioned')
  async versioned(): Promise<object> {
    const version = this.run('versioned');
    await sleep(200);
    return { version };
  }
}

/** An interceptor of one's own: the key also names the tenant header. */
@Injectable()
class TenantCacheInterceptor extends BufferCacheInterceptor {
  protected override trackBy(context: ExecutionContext): string | undefined {
    const url = super.trackBy(context) as string | undefined;
    const tenant = context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers[
      'x-tenant'
    ];
    return url && `${tenant}:${url}`;
  }
}

@Controller('tenants')
@UseInterceptors(TenantCacheInterceptor)
class TenantsController {
  runs = 0;

  @Get()
  get(@Headers('x-tenant') tenant: string): object {
    return { tenant, run: ++this.runs };
  }
}

interface Platform {
  readonly name: string;
  readonly adapter: () => ExpressAdapter | FastifyAdapter;
}

const PLATFORMS: Platform[] = [
  { name: 'Express', adapter: () => new ExpressAdapter() },
  { name: 'Fastify', adapter: () => new FastifyAdapter() },
];

let server: RedisServer;
beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server.stop());

interface App {
  readonly nest: INestApplication;
  readonly url: string;
  readonly items: ItemsController;
}

const opened: INestApplication[] = [];
afterAll(async () => {
  for (const app of opened) await app.close();
});

async function start(
  platform: Platform,
  imports: DynamicModule[],
  interceptor: Type | undefined,
  controllers: Type[] = [ItemsController],
): Promise<App> {
  const ref = await Test.createTestingModule({
    imports,
    controllers,
    providers: interceptor ? [{ provide: APP_INTERCEPTOR, useClass: interceptor }] : [],
  }).compile();
  const nest = ref.createNestApplication(platform.adapter(), { logger: false });
  opened.push(nest);
  await nest.init();
  const instance = nest.getHttpAdapter().getInstance() as { ready?: () => Promise<unknown> };
  if (platform.name === 'Fastify') await instance.ready!();
  await nest.listen(0, '127.0.0.1');
  const url = await nest.getUrl();
  return { nest, url, items: nest.get(controllers[0]!) as ItemsController };
}

/** A BufferLockModule on the test's Redis. */
const bufferLock = (namespace: string, options: Partial<BufferLockOptions> = {}): DynamicModule =>
  BufferLockModule.forRoot({ redis: () => server.client(), namespace, ...options });

/** A worker with BufferCacheInterceptor for every route, on the test's Redis. */
function bufferApp(
  platform: Platform,
  namespace: string,
  options: Partial<BufferLockOptions> = {},
) {
  return start(platform, [bufferLock(namespace, options)], BufferCacheInterceptor);
}

interface Reply {
  readonly status: number;
  readonly text: string;
  readonly headers: Record<string, string>;
}

async function call(
  app: App,
  method: 'get' | 'post',
  path: string,
  tenant = '',
  host?: string,
): Promise<Reply> {
  const sent = request(app.url)[method](path).set('x-tenant', tenant);
  const response = await (host === undefined ? sent : sent.set('Host', host));
  // `Date` is the server's; `Age` and `ETag` this cache's own (interceptor-replay.spec.ts,
  // interceptor-conditional.spec.ts): none is compared with CacheInterceptor's answers.
  const {
    date: _date,
    age: _age,
    etag: _etag,
    ...headers
  } = response.headers as Record<string, string>;
  return { status: response.status, text: response.text, headers };
}

const withoutCacheHeader = ({ headers, ...reply }: Reply): object => {
  const { 'x-cache': _cache, ...rest } = headers;
  return { ...reply, headers: rest };
};

describe.each(PLATFORMS)('BufferCacheInterceptor on $name', (platform) => {
  const namespace = `test:interceptor:${platform.name}:`;
  let ours: App;
  let theirs: App;
  let worker: App;
  beforeAll(async () => {
    ours = await bufferApp(platform, namespace);
    worker = await bufferApp(platform, namespace);
    theirs = await start(platform, [CacheModule.register()], CacheInterceptor);
  });

  it.each(['/items?n=1', '/items/text', '/items/list'])(
    'GET %s: MISS then HIT, with the status, body and headers of CacheInterceptor',
    async (path) => {
      const first = await call(ours, 'get', path);
      const second = await call(ours, 'get', path);
      expect(first.headers['x-cache']).toBe('MISS');
      expect(second.headers['x-cache']).toBe('HIT');
      expect(first.status).toBe(200);
      expect(withoutCacheHeader(second)).toEqual(withoutCacheHeader(first));

      const theirFirst = await call(theirs, 'get', path);
      const theirSecond = await call(theirs, 'get', path);
      expect(first).toEqual(theirFirst);
      expect(second).toEqual(theirSecond);
      expect(first.headers['content-type']).toBe(theirFirst.headers['content-type']);
    },
  );

  it('runs the handler once for a MISS and not again for the HIT', async () => {
    await call(ours, 'get', '/items?n=2');
    await call(ours, 'get', '/items?n=2');
    expect(ours.items.runs('object:2')).toBe(1);
  });

  it('@CacheKey("custom") keys the entry, whatever the URL', async () => {
    const first = await call(ours, 'get', '/items/custom?x=1');
    const second = await call(ours, 'get', '/items/custom?x=2');
    expect([first.headers['x-cache'], second.headers['x-cache']]).toEqual(['MISS', 'HIT']);
    expect(JSON.parse(second.text)).toEqual({ x: '1', run: 1 });
    const theirReplies = [
      await call(theirs, 'get', '/items/custom?x=1'),
      await call(theirs, 'get', '/items/custom?x=2'),
    ];
    expect([first, second]).toEqual(theirReplies);
  });

  it('@CacheTTL(100) is milliseconds: the entry expires after about 100 ms, then MISS again', async () => {
    expect((await call(ours, 'get', '/items/short')).headers['x-cache']).toBe('MISS');
    expect((await call(ours, 'get', '/items/short')).headers['x-cache']).toBe('HIT');
    await sleep(160);
    const again = await call(ours, 'get', '/items/short');
    expect(again.headers['x-cache']).toBe('MISS');
    expect(JSON.parse(again.text)).toEqual({ run: 2 });
  });

  it('@CacheTTL(fn) is called with the ExecutionContext', async () => {
    expect((await call(ours, 'get', '/items/computed-ttl')).headers['x-cache']).toBe('MISS');
    expect((await call(ours, 'get', '/items/computed-ttl')).headers['x-cache']).toBe('HIT');
    await sleep(160);
    expect((await call(ours, 'get', '/items/computed-ttl')).headers['x-cache']).toBe('MISS');
  });

  it('POST is not cached: it runs every time, with no X-Cache, as under CacheInterceptor', async () => {
    const replies = [await call(ours, 'post', '/items'), await call(ours, 'post', '/items')];
    expect(replies.map((reply) => [reply.status, JSON.parse(reply.text)])).toEqual([
      [201, { created: 1 }],
      [201, { created: 2 }],
    ]);
    expect(replies[0]!.headers['x-cache']).toBeUndefined();
    const theirReplies = [
      await call(theirs, 'post', '/items'),
      await call(theirs, 'post', '/items'),
    ];
    expect(replies).toEqual(theirReplies);
  });

  it('a throwing handler gives the same error response and is not cached', async () => {
    const replies = [
      await call(ours, 'get', '/items/broken'),
      await call(ours, 'get', '/items/broken'),
    ];
    expect(replies[0]!.status).toBe(404);
    expect(JSON.parse(replies[0]!.text)).toMatchObject({ message: 'no such report' });
    expect(ours.items.runs('broken')).toBe(2);
    const theirReplies = [
      await call(theirs, 'get', '/items/broken'),
      await call(theirs, 'get', '/items/broken'),
    ];
    expect(replies).toEqual(theirReplies);
  });

  it('a StreamableFile is sent and not cached, as under CacheInterceptor', async () => {
    const replies = [
      await call(ours, 'get', '/items/file'),
      await call(ours, 'get', '/items/file'),
    ];
    expect(replies[0]!.status).toBe(200);
    expect(replies[0]!.headers['x-cache']).toBe('MISS');
    expect(ours.items.runs('file')).toBe(2);
    const theirReplies = [
      await call(theirs, 'get', '/items/file'),
      await call(theirs, 'get', '/items/file'),
    ];
    expect(replies).toEqual(theirReplies);
  });

  it('50 concurrent requests on a cold key run the handler once', async () => {
    const replies = await Promise.all(
      Array.from({ length: 50 }, () => call(ours, 'get', '/items/slow?n=one')),
    );
    expect(ours.items.runs('slow:one')).toBe(1);
    expect(new Set(replies.map((reply) => reply.text))).toEqual(
      new Set([JSON.stringify({ n: 'one', run: 1 })]),
    );
    // The waiters too: no entry was there when they came.
    expect(new Set(replies.map((reply) => reply.headers['x-cache']))).toEqual(new Set(['MISS']));
    expect(replies.every((reply) => reply.status === 200)).toBe(true);
  });

  it('50 concurrent requests on a cold key across two workers run the handler once in total', async () => {
    // Both workers behind one public name: a URL key names the Host.
    const replies = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        call(i % 2 ? worker : ours, 'get', '/items/slow?n=two', '', 'shop.example'),
      ),
    );
    expect(ours.items.runs('slow:two') + worker.items.runs('slow:two')).toBe(1);
    expect(new Set(replies.map((reply) => reply.text)).size).toBe(1);
    expect(new Set(replies.map((reply) => reply.headers['x-cache']))).toEqual(new Set(['MISS']));
    expect(replies.every((reply) => reply.status === 200)).toBe(true);
  });

  it('an interceptor of its own (trackBy overridden) under @UseInterceptors', async () => {
    const tenants = await start(platform, [bufferLock(`${namespace}tenants:`)], undefined, [
      TenantsController,
    ]);
    const a = await call(tenants, 'get', '/tenants', 'a');
    const b = await call(tenants, 'get', '/tenants', 'b');
    const again = await call(tenants, 'get', '/tenants', 'a');
    expect([a, b, again].map((reply) => reply.headers['x-cache'])).toEqual(['MISS', 'MISS', 'HIT']);
    expect(JSON.parse(again.text)).toEqual({ tenant: 'a', run: 1 });
  });

  describe('with cacheDefaults { ttl: 0.1, grace: 30 }', () => {
    let stale: App;
    beforeAll(async () => {
      stale = await bufferApp(platform, `${namespace}stale:`, {
        cacheDefaults: { ttl: 0.1, grace: 30 },
      });
    });

    it('an expired entry is served STALE at once, and a later request gets the refreshed body', async () => {
      const first = await call(stale, 'get', '/items/versioned');
      expect(first.headers['x-cache']).toBe('MISS');
      expect(JSON.parse(first.text)).toEqual({ version: 1 });
      await sleep(150);

      const cache = stale.nest.get(BufferCache);
      let built = false;
      const refreshed = new Promise((resolve) => cache.once('built', resolve)).then(
        () => (built = true),
      );
      const served = await call(stale, 'get', '/items/versioned');
      // The handler takes 200 ms: the stale answer came before the refresh ended.
      expect(built).toBe(false);
      expect(served.headers['x-cache']).toBe('STALE');
      expect(served.text).toBe(first.text);

      await refreshed;
      expect(stale.items.runs('versioned')).toBe(2);
      const later = await call(stale, 'get', '/items/versioned');
      expect(JSON.parse(later.text)).toEqual({ version: 2 });
      expect(later.headers['x-cache']).not.toBe('MISS');
    });
  });
});

describe('BufferCacheInterceptor and @nestjs/cache-manager', () => {
  it('the library never loads @nestjs/cache-manager at run time: type-only imports at most', async () => {
    const { readdir, readFile } = await import('node:fs/promises');
    const root = new URL('../../lib/', import.meta.url);
    const files = (await readdir(root, { recursive: true })).filter((f) => f.endsWith('.ts'));
    for (const file of files) {
      const text = await readFile(new URL(file, root), 'utf8');
      const runtime = text.match(/^import (?!type )[^;]*from '@nestjs\/cache-manager'/m);
      expect(runtime, file).toBeNull();
    }
  });
});

/** An RPC context for `handler`, in an app without an HTTP adapter. */
function rpcContext(handler: () => unknown): ExecutionContext {
  return {
    getType: () => 'rpc',
    getHandler: () => handler,
    getClass: () => ItemsController,
    getArgByIndex: () => ({ pattern: 'report' }),
    switchToRpc: () => ({ getData: () => ({ id: 1 }), getContext: () => ({}) }),
    switchToHttp: () => ({ getRequest: () => ({}), getResponse: () => ({}) }),
  } as unknown as ExecutionContext;
}
const event = (): void => {};
// `@EventPattern('report.viewed')`'s metadata, as @nestjs/microservices sets it.
Reflect.defineMetadata('microservices:handler_type', 2, event);
Reflect.defineMetadata('microservices:pattern', [{ cmd: 'report.viewed' }], event);
const keyed = (): void => {};
CacheKey('rpc-report')(keyed, 'keyed', { value: keyed });

describe('BufferCacheInterceptor in an RPC context', () => {
  const namespace = 'test:interceptor:rpc:';
  let cache: BufferCache;
  beforeAll(() => {
    const lock = new RedisLockService({ redis: () => server.client(), namespace });
    cache = new BufferCache({ lock });
  });

  function interceptor(): BufferCacheInterceptor {
    const made = new BufferCacheInterceptor(cache, new Reflector());
    Object.assign(made, { httpAdapterHost: new HttpAdapterHost() });
    return made;
  }

  it('runs an event handler every time: an event is never cached', async () => {
    let runs = 0;
    const next = { handle: (): Observable<number> => of(++runs) };
    const first = await firstValueFrom(await interceptor().intercept(rpcContext(event), next));
    const second = await firstValueFrom(await interceptor().intercept(rpcContext(event), next));
    expect([first, second]).toEqual([1, 2]);
  });

  it("keeps a reply under its handler's @CacheKey, and answers the next message from it", async () => {
    let runs = 0;
    const next = { handle: (): Observable<number> => of(++runs) };
    const first = await firstValueFrom(await interceptor().intercept(rpcContext(keyed), next));
    const second = await firstValueFrom(await interceptor().intercept(rpcContext(keyed), next));
    expect([first, second]).toEqual([1, 1]);
    expect(await cache.get('rpc-report')).toBe(1);
  });
});
