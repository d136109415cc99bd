// The GraphQL app of the resolver benchmark, one per worker process (Apollo on Express): three
// root fields with the same resolver body (BENCH_BUILD_MS of work), `plain` bare, `managed` under
// @nestjs/cache-manager's CacheInterceptor and `buffered` under BufferCacheInterceptor; `GET
// /runs` says how often each ran here. Sends its port over IPC once listening.
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { CacheInterceptor, CacheModule } from '@nestjs/cache-manager';
import { Controller, Get, Module, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Args, GraphQLModule, Query, Resolver } from '@nestjs/graphql';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';

const buildMs = Number(process.env['BENCH_BUILD_MS'] ?? 100);
const runs: Record<string, number> = {};

async function book(field: string, id: string): Promise<object> {
  runs[field] = (runs[field] ?? 0) + 1;
  await new Promise((resolve) => setTimeout(resolve, buildMs));
  return { id, title: `Book ${id}`, pid: process.pid };
}

const typeDefs = /* GraphQL */ `
  type Book {
    id: ID!
    title: String!
    pid: Int!
  }
  type Query {
    plain(id: ID!): Book!
    managed(id: ID!): Book!
    buffered(id: ID!): Book!
  }
`;

@Resolver()
class BooksResolver {
  @Query('plain')
  plain(@Args('id') id: string): Promise<object> {
    return book('plain', id);
  }

  @Query('managed')
  @UseInterceptors(CacheInterceptor)
  managed(@Args('id') id: string): Promise<object> {
    return book('managed', id);
  }

  @Query('buffered')
  @UseInterceptors(BufferCacheInterceptor)
  buffered(@Args('id') id: string): Promise<object> {
    return book('buffered', id);
  }
}

@Controller()
class RunsController {
  @Get('runs')
  runs(): Record<string, number> {
    return runs;
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: `redis://127.0.0.1:${process.env['BENCH_REDIS_PORT']}`,
      namespace: 'bench:graphql:',
      isGlobal: true,
      cacheDefaults: { ttl: 60 },
      logger: { log() {}, warn() {}, error() {} },
    }),
    CacheModule.register({ ttl: 60_000 }),
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, typeDefs }),
  ],
  controllers: [RunsController],
  providers: [BooksResolver],
})
class GraphqlBenchModule {}

const app = await NestFactory.create(GraphqlBenchModule, { logger: false });
await app.listen(0, '127.0.0.1');
process.send!({ port: Number(new URL(await app.getUrl()).port) });
process.on('disconnect', () => void app.close().then(() => process.exit(0)));
