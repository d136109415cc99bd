/**
 * A worker process of test/multi-process/graphql.spec.ts: a Nest GraphQL app on Apollo (Express)
 * or Mercurius (Fastify) with DRIVER=mercurius, whose resolvers sit under BufferCacheInterceptor,
 * on the Redis at REDIS_URL, listening on a free port that `port` answers with. `GET /runs` says
 * how often each resolver ran here. Environment: REDIS_URL, NS, DRIVER.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Controller, Get, Module, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Args, GraphQLModule, Mutation, Query, Resolver } from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import type { HttpCommand, HttpReply } from './http.protocol.js';

const send = (reply: HttpReply): void => void process.send!(reply);
const runs: Record<string, number> = {};
const ran = (name: string): number => (runs[name] = (runs[name] ?? 0) + 1);

const typeDefs = /* GraphQL */ `
  type Book {
    id: ID!
    pid: Int!
    run: Int!
  }
  type Query {
    book(id: ID!, ms: Int): Book!
  }
  type Mutation {
    borrow(id: ID!): Book!
  }
`;

@Resolver()
@UseInterceptors(BufferCacheInterceptor)
class BooksResolver {
  @Query('book')
  async book(@Args('id') id: string, @Args('ms') ms?: number): Promise<object> {
    const run = ran(`book:${id}`);
    await new Promise((resolve) => setTimeout(resolve, ms ?? 0));
    return { id, pid: process.pid, run };
  }

  @Mutation('borrow')
  borrow(@Args('id') id: string): object {
    return { id, pid: process.pid, run: ran(`borrow:${id}`) };
  }
}

@Controller()
class RunsController {
  @Get('runs')
  runs(): Record<string, number> {
    return runs;
  }
}

const mercurius = process.env['DRIVER'] === 'mercurius';

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: process.env['REDIS_URL']!,
      namespace: process.env['NS']!,
      isGlobal: true,
      logger: { log() {}, warn() {}, error() {} },
    }),
    mercurius
      ? GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver, typeDefs })
      : GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, typeDefs }),
  ],
  controllers: [RunsController],
  providers: [BooksResolver],
})
class GraphqlWorkerModule {}

const app = await NestFactory.create(
  GraphqlWorkerModule,
  mercurius ? new FastifyAdapter() : new ExpressAdapter(),
  { logger: false },
);
await app.listen(0, '127.0.0.1');
const { port } = new URL(await app.getUrl());

process.on('message', (command: HttpCommand) => send({ id: command.id, port: Number(port) }));
process.on('disconnect', () => void app.close().then(() => process.exit(0)));
send({ ready: true });
