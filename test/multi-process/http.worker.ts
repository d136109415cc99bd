/**
 * A worker process of test/multi-process/http.spec.ts: a Nest HTTP app (Express, or Fastify with
 * PLATFORM=fastify) whose routes sit under BufferCacheInterceptor, on the Redis at REDIS_URL,
 * listening on a free port that `port` answers with. Environment: REDIS_URL, NS, PLATFORM.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { Controller, Get, HttpCode, Module, Post, Res, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { BufferCacheInterceptor, BufferLockModule } from '../../lib/index.js';
import type { HttpCommand, HttpReply } from './http.protocol.js';

const send = (reply: HttpReply): void => void process.send!(reply);
let runs = 0;

interface Reply {
  header(name: string, value: string): unknown;
}

@Controller()
@UseInterceptors(BufferCacheInterceptor)
class PagesController {
  /** A page that sets a visitor cookie: its answer is this visitor's alone. */
  @Get('welcome')
  welcome(@Res({ passthrough: true }) res: Reply): object {
    const run = ++runs;
    res.header('Set-Cookie', `sid=${process.pid}-${run}; HttpOnly`);
    return { pid: process.pid, run };
  }

  /** A page anyone may be given. */
  @Get('item')
  item(): object {
    return { pid: process.pid, run: ++runs };
  }

  /** A write of the item: its success deletes the item's entry in every worker. */
  @Post('item')
  @HttpCode(201)
  update(): object {
    return { pid: process.pid, updated: true };
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: process.env['REDIS_URL']!,
      namespace: process.env['NS']!,
      logger: { log() {}, warn() {}, error() {} },
    }),
  ],
  controllers: [PagesController],
})
class HttpWorkerModule {}

const fastify = process.env['PLATFORM'] === 'fastify';
const app = await NestFactory.create(
  HttpWorkerModule,
  fastify ? new FastifyAdapter() : new ExpressAdapter(),
  { logger: false },
);
await app.listen(0, '127.0.0.1');
const { port } = new URL(await app.getUrl());

process.on('message', (command: HttpCommand) => send({ id: command.id, port: Number(port) }));
process.on('disconnect', () => void app.close().then(() => process.exit(0)));
send({ ready: true });
