/**
 * A worker process of test/multi-process/idempotency.spec.ts: a Nest HTTP app (Express, or
 * Fastify with PLATFORM=fastify) whose order routes are `@Idempotent`, on the Redis at REDIS_URL,
 * listening on a free port that `port` answers with. `GET /runs` says how often each key's
 * handler ran here. Environment: REDIS_URL, NS, PLATFORM.
 */
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  Module,
  NotFoundException,
  Post,
  Query,
  ServiceUnavailableException,
} from '@nestjs/common';
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

/** `place()`, unless told to fail: then a run that throws (counted as a run all the same). */
async function failOr(fail: string | undefined, placed: () => Promise<Order>): Promise<Order> {
  if (fail === undefined) return placed();
  await placed();
  if (fail === '404') throw new NotFoundException('no such item');
  throw new ServiceUnavailableException('the warehouse is down');
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

  /** Fails with a 503 (`X-Fail: 503`) or a 404 (`X-Fail: 404`) when told: never part of the request's fingerprint. */
  @Post('flaky-orders')
  @HttpCode(201)
  @Idempotent()
  flaky(
    @Headers('idempotency-key') key: string,
    @Headers('x-fail') fail: string | undefined,
    @Body() body: { item: unknown },
  ): Promise<Order> {
    return failOr(fail, () => place(key, body.item, undefined));
  }

  @Post('remembered-orders')
  @HttpCode(201)
  @Idempotent({ storeErrors: true })
  remembered(
    @Headers('idempotency-key') key: string,
    @Headers('x-fail') fail: string | undefined,
    @Body() body: { item: unknown },
  ): Promise<Order> {
    return failOr(fail, () => place(key, body.item, undefined));
  }

  @Post('brief-orders')
  @HttpCode(201)
  @Idempotent({ expiresAfter: 1 })
  brief(@Headers('idempotency-key') key: string, @Body() body: { item: unknown }): Promise<Order> {
    return place(key, body.item, undefined);
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
