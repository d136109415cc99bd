import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module, UseInterceptors, type INestApplication } from '@nestjs/common';
import {
  GraphQLModule,
  Args,
  Mutation,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  BufferCacheInterceptor,
  BufferLockModule,
  Cached,
  CacheEvict,
  CachePut,
  Idempotent,
  SingleFlight,
} from '../../lib/index.js';
import { deferred, until } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * The cache on GraphQL resolvers, on Apollo (Express) and on Mercurius (Fastify), on a real
 * redis-server: `BufferCacheInterceptor` caches a query's field by its path, arguments and
 * parent, built once for concurrent identical queries and not run on a hit; a mutation is never
 * cached; a request with `Authorization` or `Cookie` is answered by its own resolver run and never
 * stored; `@Cached` and `@CacheEvict` work on resolver methods as on any method.
 */

const typeDefs = /* GraphQL */ `
  type Author {
    id: ID!
    name: String!
    run: Int!
  }
  type Book {
    id: ID!
    title: String!
    run: Int!
    author: Author!
  }
  type Query {
    book(id: ID!): Book!
    price(id: ID!): Int!
  }
  type Mutation {
    rename(id: ID!, title: String!): Book!
    reprice(id: ID!): Boolean!
    setPrice(id: ID!, cents: Int!): Int!
    order(item: String!): Int!
    reindex: Int!
  }
`;

const counts = { book: 0, author: 0, rename: 0, price: 0 };
let gate = deferred();

interface Book {
  readonly id: string;
  readonly title: string;
  readonly run: number;
}

@Resolver('Book')
@UseInterceptors(BufferCacheInterceptor)
class BookResolver {
  @Query('book')
  async book(@Args('id') id: string): Promise<Book> {
    const run = ++counts.book;
    await gate.promise;
    return { id, title: `Book ${id}`, run };
  }

  @ResolveField('author')
  author(@Parent() book: Book): object {
    return { id: `a${book.id}`, name: `Author of ${book.id}`, run: ++counts.author };
  }

  @Mutation('rename')
  rename(@Args('id') id: string, @Args('title') title: string): Book {
    return { id, title, run: ++counts.rename };
  }
}

@Resolver()
class PriceResolver {
  @Query('price')
  @Cached((id: string) => `price:${id}`, { ttl: 60 })
  async price(@Args('id') id: string): Promise<number> {
    return 100 * Number(id) + ++counts.price;
  }

  @Mutation('setPrice')
  @CachePut((id: string) => `price:${id}`)
  async setPrice(@Args('id') _id: string, @Args('cents') cents: number): Promise<number> {
    return cents;
  }

  @Mutation('order')
  @Idempotent()
  order(@Args('item') _item: string): number {
    return ++counts.price;
  }

  @Mutation('reindex')
  @SingleFlight('graphql-reindex', { onBusy: 'throw' })
  async reindex(): Promise<number> {
    const run = ++counts.price;
    await gate.promise;
    return run;
  }

  @Mutation('reprice')
  @CacheEvict((id: string) => `price:${id}`)
  async reprice(@Args('id') _id: string): Promise<boolean> {
    return true;
  }
}

const drivers = [
  {
    name: 'Apollo',
    adapter: () => new ExpressAdapter(),
    graphql: () =>
      GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        typeDefs,
        fieldResolverEnhancers: ['interceptors'],
      }),
  },
  {
    name: 'Mercurius',
    adapter: () => new FastifyAdapter(),
    graphql: () =>
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        typeDefs,
        fieldResolverEnhancers: ['interceptors'],
      }),
  },
];

let redis: RedisServer;
beforeAll(async () => {
  redis = await startRedis();
});
afterAll(async () => {
  await redis.stop();
});

describe.each(drivers)('resolvers on $name', (driver) => {
  let app: INestApplication;
  let url: string;
  let stamp = 0;
  /** Price ids: one per test (each driver's app has a namespace of its own). */
  let prices = 0;

  /** The answer's `data`; its errors, if any, thrown. */
  const query = async (
    text: string,
    headers: Record<string, string> = {},
  ): Promise<Record<string, { run: number; author?: unknown } & Record<string, unknown>>> => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ query: text }),
    });
    const answer = (await response.json()) as { data?: Record<string, never>; errors?: unknown };
    if (!answer.data) throw new Error(JSON.stringify(answer.errors));
    return answer.data;
  };

  beforeAll(async () => {
    @Module({
      imports: [
        BufferLockModule.forRoot({
          redis: redis.url,
          namespace: `test:graphql:${driver.name}:`,
          isGlobal: true,
        }),
        driver.graphql(),
      ],
      providers: [BookResolver, PriceResolver],
    })
    class AppModule {}
    const ref = await Test.createTestingModule({ imports: [AppModule] }).compile();
    app = ref.createNestApplication(driver.adapter(), { logger: false });
    await app.listen(0, '127.0.0.1');
    url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
  }, 30_000);
  afterAll(async () => {
    await app?.close();
  });
  beforeEach(() => {
    Object.assign(counts, { book: 0, author: 0, rename: 0, price: 0 });
    gate = deferred();
    gate.resolve();
    stamp = Date.now() + Math.random();
  });

  it('runs a query field once for 20 concurrent identical queries, and not at all on a later hit', async () => {
    gate = deferred();
    const text = `{ book(id: "${stamp}") { id title run } }`;
    const answers = Promise.all(Array.from({ length: 20 }, () => query(text)));
    await until(() => counts.book > 0);
    gate.resolve();
    const book = { id: String(stamp), title: `Book ${stamp}`, run: 1 };
    expect(await answers).toEqual(Array.from({ length: 20 }, () => ({ book })));
    expect(await query(text)).toEqual({ book });
    expect(counts.book).toBe(1);
  });

  it('keys a field by its arguments: another id is another run', async () => {
    await query(`{ book(id: "${stamp}") { run } }`);
    const other = await query(`{ book(id: "${stamp}-2") { run } }`);
    expect(other).toEqual({ book: { run: 2 } });
  });

  /** The authors of this test's books 1 and 2. */
  const authorsOf = async (): Promise<unknown[]> =>
    Promise.all(
      ['1', '2'].map(async (n) => {
        const answer = await query(`{ book(id: "${stamp}-${n}") { author { name run } } }`);
        return answer['book']!.author;
      }),
    );

  it("keys a field resolver by its parent's type and id: each book's author once", async () => {
    const first = await authorsOf();
    const again = await authorsOf();
    expect(counts.author).toBe(2);
    expect(again).toEqual(first);
    expect(new Set(first.map((author) => JSON.stringify(author))).size).toBe(2);
  });

  it('never caches a mutation: each one runs', async () => {
    const text = `mutation { rename(id: "${stamp}", title: "New") { run } }`;
    const runs = [await query(text), await query(text)].map((answer) => answer['rename']!.run);
    expect(runs).toEqual([1, 2]);
  });

  it('answers a request with Authorization or Cookie by its own run, and never stores it', async () => {
    const text = `{ book(id: "${stamp}") { run } }`;
    const alice = await query(text, { authorization: 'Bearer alice' });
    const bob = await query(text, { cookie: 'sid=bob' });
    const anonymous = await query(text);
    const aliceAgain = await query(text, { authorization: 'Bearer alice' });
    const runs = [alice, bob, anonymous, aliceAgain].map((answer) => answer['book']!.run);
    expect(runs).toEqual([1, 2, 3, 4]);
  });

  it('@CachePut on a mutation stores what the query then answers', async () => {
    const id = String(++prices);
    await query(`mutation { setPrice(id: "${id}", cents: 7) }`);
    expect((await query(`{ price(id: "${id}") }`))['price']).toBe(7);
    expect(counts.price).toBe(0);
  });

  it("@SingleFlight on a mutation refuses a concurrent one, as a GraphQL error in the lock's words", async () => {
    gate = deferred();
    const first = query('mutation { reindex }');
    await until(() => counts.price > 0);
    const busy = await query('mutation { reindex }').catch((error: Error) => error.message);
    gate.resolve();
    expect((await first)['reindex']).toBe(1);
    expect(busy).toContain('This entry is being built by another worker; try again shortly');
    expect(counts.price).toBe(1);
  });

  it('@Idempotent on a resolver refuses to run, saying where it works', async () => {
    const refused = await query('mutation { order(item: "tea") }').catch(
      (error: Error) => error.message,
    );
    expect(refused).toContain(
      '@Idempotent on PriceResolver.order works on HTTP routes and message handlers, not in a graphql context',
    );
    expect(counts.price).toBe(0);
  });

  it('@Cached and @CacheEvict work on resolver methods as on any method', async () => {
    const id = String(++prices);
    const price = `{ price(id: "${id}") }`;
    const first = await query(price);
    const hit = await query(price);
    await query(`mutation { reprice(id: "${id}") }`);
    const rebuilt = await query(price);
    expect([first, hit, rebuilt].map((answer) => answer['price'])).toEqual([
      100 * Number(id) + 1,
      100 * Number(id) + 1,
      100 * Number(id) + 2,
    ]);
  });
});
