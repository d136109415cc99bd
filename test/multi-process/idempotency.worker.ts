/**
 * A worker process of test/multi-process/idempotency.spec.ts: a Nest HTTP app (Express, or
 * Fastify with PLATFORM=fastify) whose order routes are `@Idempotent`, on the Redis at REDIS_URL,
 * listening on a free port that `port` answers with. `GET /runs` says how often each key's
 * handler ran here. Environment: REDIS_URL, NS, PLATFORM.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { Body, Controller, Get, Headers, HttpCode, Module, Post, Query } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { BufferLockModule, Idempotent } from '../../lib/index.js';
import type { HttpCommand, HttpReply } from './http.protocol.js';

const send = (reply: HttpReply): void => void process.send!(reply);
const runs: Record<string, number> = {};
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

interface Order {
  readonly pid: number;
  readonly run: number;
  readonly item: unknown;
}

/** One run of a handler: counted by key, slow for `ms`, then its order. */
async function place(key: string, item: unknown, ms: string | undefined): Promise<Order> {
  runs[key] = (runs[key] ?? 0) + 1;
  await sleep(Number(ms ?? 0));
  return { pid: process.pid, run: runs[key], item };
}

@Controller()
class OrdersController {
  @Post('orders')
  @HttpCode(201)
  @Idempotent()
  create(
    @Headers('idempotency-key') key: string,
    @Body() body: { item: unknown },
    @Query('ms') ms?: string,
  ): Promise<Order> {
    return place(key, body.item, ms);
  }

  @Post('waited-orders')
  @HttpCode(201)
  @Idempotent({ onBusy: 'wait', lockTimeout: 10 })
  waited(
    @Headers('idempotency-key') key: string,
    @Body() body: { item: unknown },
    @Query('ms') ms?: string,
  ): Promise<Order> {
    return place(key, body.item, ms);
  }

  /** With a lock of 1 s (extended while it runs): a dead worker's key is free 1 s on. */
  @Post('short-lock-orders')
  @HttpCode(201)
  @Idempotent({ ttl: 1, lockTimeout: 0.5 })
  shortLock(
    @Headers('idempotency-key') key: string,
    @Body() body: { item: unknown },
    @Query('ms') ms?: string,
  ): Promise<Order> {
    return place(key, body.item, ms);
  }

  @Get('runs')
  runs(): Record<string, number> {
    return runs;
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
  controllers: [OrdersController],
})
class IdempotencyWorkerModule {}

const fastify = process.env['PLATFORM'] === 'fastify';
const app = await NestFactory.create(
  IdempotencyWorkerModule,
  fastify ? new FastifyAdapter() : new ExpressAdapter(),
  { logger: false },
);
await app.listen(0, '127.0.0.1');
const { port } = new URL(await app.getUrl());

process.on('message', (command: HttpCommand) => send({ id: command.id, port: Number(port) }));
process.on('disconnect', () => void app.close().then(() => process.exit(0)));
send({ ready: true });
