import {
  Controller,
  Get,
  Injectable,
  Param,
  Patch,
  Put,
  Query,
  type INestApplication,
} from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
// Observable is imported as a value: design:returntype then names it.
import {
  EMPTY,
  from,
  isObservable,
  lastValueFrom,
  map,
  mergeMap,
  Observable,
  of,
  Subject,
} from 'rxjs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BufferCache, BufferLockModule, CacheEvict, CachePut, Cached } from '../../lib/index.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * `@CacheEvict` and `@CachePut` on methods that return an Observable, whether the type is
 * declared, left to inference, or one that reads as `Object` (a union): each subscription acts
 * once its Observable completes, never before, and not at all when it errors. Through Express and
 * Fastify, on a real redis-server.
 */

/** The names the writes change. */
const database = new Map<string, string>();
let builds = 0;
/** Opened by the test: a write waits on it, so that a read can come while the write runs. */
let gate = deferred();
let writesStarted = 0;

/** A write that runs on subscription, once the gate is open. */
function write(id: string, name: string, fail: boolean): Observable<string> {
  writesStarted++;
  return from(gate.promise).pipe(
    map(() => {
      if (fail) throw new Error('the database refused');
      database.set(id, name);
      return `renamed ${id}`;
    }),
  );
}

const feed = new Subject<number>();

@Injectable()
class Drafts {
  @Cached((id: string) => `obs:draft:${id}`, { ttl: 600 })
  async read(id: string): Promise<{ name: string; build: number }> {
    return { name: database.get(id) ?? 'none', build: ++builds };
  }

  @CacheEvict((id: string) => `obs:draft:${id}`)
  renameDeclared(id: string, name: string, fail = false): Observable<string> {
    return write(id, name, fail);
  }

  // oxlint-disable-next-line typescript/explicit-function-return-type -- the type is inferred here on purpose
  @CacheEvict((id: string) => `obs:draft:${id}`)
  renameInferred(id: string, name: string, fail = false) {
    return write(id, name, fail);
  }

  @CacheEvict((id: string) => `obs:draft:${id}`)
  renameUnion(id: string, name: string, fail = false): Observable<string> | Promise<string> {
    return write(id, name, fail);
  }

  /** Decorated below by hand: no design:returntype at all. */
  renameBare(id: string, name: string, fail = false): Observable<string> {
    return write(id, name, fail);
  }

  @CacheEvict((id: string) => `obs:draft:${id}`)
  async renameLater(id: string, name: string, fail = false): Promise<Observable<string>> {
    return write(id, name, fail);
  }

  @CacheEvict((id: string) => `obs:draft:${id}`)
  async renamePromise(id: string, name: string): Promise<string> {
    await gate.promise;
    database.set(id, name);
    return `renamed ${id}`;
  }

  // oxlint-disable-next-line typescript/explicit-function-return-type -- the type is inferred here on purpose
  @CacheEvict('obs:feed')
  feed() {
    return feed.asObservable();
  }

  @CacheEvict('obs:once')
  once(): Observable<string> {
    return of('a');
  }

  @CacheEvict('obs:empty')
  nothing(): Observable<never> {
    return EMPTY;
  }

  // oxlint-disable-next-line typescript/explicit-function-return-type -- the type is inferred here on purpose
  @CachePut((id: string) => `obs:draft:${id}`, { ttl: 600 })
  save(_id: string, names: string[], fail = false) {
    writesStarted++;
    // Every name in turn, as a stream of saves would: the last one is the entry.
    return from(gate.promise).pipe(
      mergeMap(() => {
        if (fail) throw new Error('the database refused');
        return from(names.map((name) => ({ name, at: new Date(0) as Date | string, build: 0 })));
      }),
    );
  }

  @CachePut('obs:put:empty')
  saveNothing(): Observable<never> {
    return EMPTY;
  }
}

{
  const descriptor = Object.getOwnPropertyDescriptor(Drafts.prototype, 'renameBare')!;
  CacheEvict((id: string) => `obs:draft:${id}`)(Drafts.prototype, 'renameBare', descriptor);
  Object.defineProperty(Drafts.prototype, 'renameBare', descriptor);
}

@Controller('drafts')
class DraftsController {
  constructor(private readonly drafts: Drafts) {}

  @Get(':id')
  read(@Param('id') id: string): Promise<unknown> {
    return this.drafts.read(id);
  }

  // oxlint-disable-next-line typescript/explicit-function-return-type -- the type is inferred here on purpose
  @Patch(':id')
  @CacheEvict((id: string) => `obs:draft:${id}`)
  rename(@Param('id') id: string, @Query('name') name: string, @Query('fail') fail?: string) {
    return write(id, name, fail === '1');
  }

  // oxlint-disable-next-line typescript/explicit-function-return-type -- the type is inferred here on purpose
  @Put(':id')
  @CachePut((id: string) => `obs:draft:${id}`, { ttl: 600 })
  replace(@Param('id') _id: string, @Query('name') name: string) {
    return of({ name: 'draft', build: 0 }, { name, build: 0 });
  }
}

let server: RedisServer;

beforeAll(async () => {
  server = await startRedis();
});
afterAll(() => server?.stop());

async function start(adapter: ExpressAdapter | FastifyAdapter): Promise<INestApplication> {
  const moduleRef = await Test.createTestingModule({
    imports: [BufferLockModule.forRoot({ redis: server.url, l1: { maxAge: 60 } })],
    controllers: [DraftsController],
    providers: [Drafts],
  }).compile();
  const app = moduleRef.createNestApplication(adapter, { logger: false });
  await app.init();
  if (adapter instanceof FastifyAdapter) {
    await (app as NestFastifyApplication).getHttpAdapter().getInstance().ready();
  }
  return app;
}

describe('on a service method', () => {
  let app: INestApplication;
  let drafts: Drafts;
  let cache: BufferCache;

  beforeAll(async () => {
    app = await start(new ExpressAdapter());
    drafts = app.get(Drafts);
    cache = app.get(BufferCache);
  });
  afterAll(() => app?.close());

  it('the method declared to return an Observable is the only one whose design:returntype names it', () => {
    expect(typeOf('renameDeclared')).toBe(Observable);
    expect(typeOf('renameInferred')).not.toBe(Observable);
    expect(typeOf('renameUnion')).toBe(Object);
    expect(typeOf('renameBare')).toBeUndefined();
  });

  it.each(['renameDeclared', 'renameInferred', 'renameUnion', 'renameBare'] as const)(
    '@CacheEvict on %s: an Observable comes back, and the entry goes once it completes, never before',
    async (method) => {
      const id = method;
      database.set(id, 'old');
      const first = await drafts.read(id);
      gate = deferred();
      writesStarted = 0;
      const answer = drafts[method](id, 'new');
      expect(isObservable(answer)).toBe(true);
      const done = lastValueFrom(answer as Observable<string>);
      await until(() => writesStarted > 0);
      // The write has not run: the entry is still the one built before it.
      expect(await drafts.read(id)).toEqual(first);
      expect(await cache.get(`obs:draft:${id}`)).toEqual(first);
      gate.resolve();
      expect(await done).toBe(`renamed ${id}`);
      expect(await cache.get(`obs:draft:${id}`)).toBeUndefined();
      expect(await drafts.read(id)).toMatchObject({ name: 'new' });
    },
  );

  it.each(['renameDeclared', 'renameInferred', 'renameUnion', 'renameBare'] as const)(
    '@CacheEvict on %s: an Observable that errors deletes nothing',
    async (method) => {
      const id = `${method}:error`;
      const first = await drafts.read(id);
      gate = deferred();
      gate.resolve();
      const answer = drafts[method](id, 'lost', true) as Observable<string>;
      await expect(lastValueFrom(answer)).rejects.toThrow('the database refused');
      expect(await cache.get(`obs:draft:${id}`)).toEqual(first);
      expect(await drafts.read(id)).toEqual(first);
    },
  );

  it('@CacheEvict on a method whose promise resolves to an Observable: deletes once that Observable completes', async () => {
    const id = 'later';
    database.set(id, 'old');
    const first = await drafts.read(id);
    gate = deferred();
    const answer = await drafts.renameLater(id, 'new');
    expect(isObservable(answer)).toBe(true);
    const done = lastValueFrom(answer);
    expect(await cache.get(`obs:draft:${id}`)).toEqual(first);
    gate.resolve();
    await done;
    expect(await drafts.read(id)).toMatchObject({ name: 'new' });
    gate = deferred();
    gate.resolve();
    const failing = await drafts.renameLater(id, 'lost', true);
    const second = await drafts.read(id);
    await expect(lastValueFrom(failing)).rejects.toThrow('the database refused');
    expect(await drafts.read(id)).toEqual(second);
  });

  it('@CacheEvict on a method returning a promise: deletes once it resolves, not while it runs', async () => {
    const id = 'promise';
    database.set(id, 'old');
    const first = await drafts.read(id);
    gate = deferred();
    const done = drafts.renamePromise(id, 'new');
    expect(done).toBeInstanceOf(Promise);
    expect(await drafts.read(id)).toEqual(first);
    gate.resolve();
    await done;
    expect(await drafts.read(id)).toMatchObject({ name: 'new' });
  });

  it('@CacheEvict: values go on one behind, the last once the entry is gone', async () => {
    await cache.set('obs:feed', 'listed');
    const seen: unknown[] = [];
    let completed = false;
    const subscription = drafts.feed().subscribe({
      next: (value) => seen.push(value),
      complete: () => (completed = true),
    });
    feed.next(1);
    expect(seen).toEqual([]);
    feed.next(2);
    expect(seen).toEqual([1]);
    expect(await cache.get('obs:feed')).toBe('listed');
    feed.complete();
    await until(() => completed);
    expect(seen).toEqual([1, 2]);
    expect(await cache.get('obs:feed')).toBeUndefined();
    subscription.unsubscribe();
  });

  it('@CacheEvict: each subscription deletes once per completion; one ended before completing deletes nothing', async () => {
    const deletes = vi.spyOn(cache, 'delete');
    try {
      const once = drafts.once();
      for (const round of [1, 2]) {
        await cache.set('obs:once', round);
        expect(await lastValueFrom(once)).toBe('a');
        expect(await cache.get('obs:once')).toBeUndefined();
        expect(deletes.mock.calls.filter(([key]) => key === 'obs:once')).toHaveLength(round);
      }
      await cache.set('obs:empty', 'kept');
      await expect(lastValueFrom(drafts.nothing(), { defaultValue: 'none' })).resolves.toBe('none');
      expect(await cache.get('obs:empty')).toBeUndefined();
      gate = deferred();
      const id = 'unsubscribed';
      const first = await drafts.read(id);
      drafts.renameInferred(id, 'never').subscribe().unsubscribe();
      gate.resolve();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(await cache.get(`obs:draft:${id}`)).toEqual(first);
    } finally {
      deletes.mockRestore();
    }
  });

  it('@CachePut: stores the last value once the Observable completes, and hands it on as a hit will return it', async () => {
    const id = 'put';
    gate = deferred();
    writesStarted = 0;
    const seen: unknown[] = [];
    const done = new Promise<void>((resolve, reject) =>
      drafts.save(id, ['first', 'last']).subscribe({
        next: (value) => seen.push(value),
        error: reject,
        complete: resolve,
      }),
    );
    await until(() => writesStarted > 0);
    expect(await cache.get(`obs:draft:${id}`)).toBeUndefined();
    gate.resolve();
    await done;
    const stored = { name: 'last', at: new Date(0).toISOString(), build: 0 };
    // The first as the method made it, the last as stored (its Date a string).
    expect(seen).toEqual([{ name: 'first', at: new Date(0), build: 0 }, stored]);
    expect(await cache.get(`obs:draft:${id}`)).toEqual(stored);
    expect(await drafts.read(id)).toEqual(stored);
  });

  it('@CachePut: an Observable that errors, or completes with no value, stores nothing', async () => {
    await cache.set('obs:draft:put-error', 'kept');
    gate = deferred();
    gate.resolve();
    await expect(lastValueFrom(drafts.save('put-error', ['lost'], true))).rejects.toThrow(
      'the database refused',
    );
    expect(await cache.get('obs:draft:put-error')).toBe('kept');
    await cache.set('obs:put:empty', 'kept');
    await expect(lastValueFrom(drafts.saveNothing(), { defaultValue: 'none' })).resolves.toBe(
      'none',
    );
    expect(await cache.get('obs:put:empty')).toBe('kept');
  });
});

const typeOf = (name: string): unknown =>
  Reflect.getMetadata('design:returntype', Drafts.prototype, name);

const PLATFORMS = [
  { name: 'Express', adapter: () => new ExpressAdapter() },
  { name: 'Fastify', adapter: () => new FastifyAdapter() },
];

describe.each(PLATFORMS)('on a route, through $name', (platform) => {
  let app: INestApplication;

  beforeAll(async () => {
    app = await start(platform.adapter());
  });
  afterAll(() => app?.close());

  it('PATCH whose handler returns an Observable: a GET while its write runs keeps the old entry, the GET after it builds the new one', async () => {
    const id = `${platform.name}-patch`;
    database.set(id, 'old');
    const http = request(app.getHttpServer());
    const first = (await http.get(`/drafts/${id}`)).body as { build: number };
    gate = deferred();
    writesStarted = 0;
    const patch = request(app.getHttpServer())
      .patch(`/drafts/${id}?name=new`)
      .then((reply) => reply);
    await until(() => writesStarted > 0);
    // Before the write ran: no reader builds the entry again from what is about to change.
    expect((await request(app.getHttpServer()).get(`/drafts/${id}`)).body).toEqual(first);
    gate.resolve();
    expect((await patch).text).toBe(`renamed ${id}`);
    const after = (await request(app.getHttpServer()).get(`/drafts/${id}`)).body;
    expect(after).toMatchObject({ name: 'new' });
  });

  it('PATCH whose Observable errors: the error is the answer, and the entry stays', async () => {
    const id = `${platform.name}-patch-error`;
    const first = (await request(app.getHttpServer()).get(`/drafts/${id}`)).body;
    gate = deferred();
    gate.resolve();
    const failed = await request(app.getHttpServer()).patch(`/drafts/${id}?name=x&fail=1`);
    expect(failed.status).toBe(500);
    expect((await request(app.getHttpServer()).get(`/drafts/${id}`)).body).toEqual(first);
  });

  it('PUT whose handler returns an Observable: its last value is the entry the GET serves', async () => {
    const id = `${platform.name}-put`;
    const put = await request(app.getHttpServer()).put(`/drafts/${id}?name=put`);
    expect(put.body).toEqual({ name: 'put', build: 0 });
    const before = builds;
    expect((await request(app.getHttpServer()).get(`/drafts/${id}`)).body).toEqual({
      name: 'put',
      build: 0,
    });
    expect(builds).toBe(before);
  });
});
