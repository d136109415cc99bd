// The HTTP app of the idempotency benchmark, one per worker process: POST routes that take
// `BUILD_MS` to place an order, `/plain/orders` bare, `/throw/orders` under `@Idempotent()` and
// `/wait/orders` under `@Idempotent({ onBusy: 'wait' })`; `GET /runs` says how often each
// `Idempotency-Key` ran here. Sends its port over IPC once listening.
/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import 'reflect-metadata';
import { Body, Controller, Get, Headers, HttpCode, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BufferLockModule, Idempotent } from '../../lib/index.js';

const buildMs = Number(process.env['BENCH_BUILD_MS'] ?? 50);
const runs: Record<string, number> = {};

async function place(key: string, item: unknown): Promise<object> {
  runs[key] = (runs[key] ?? 0) + 1;
  await new Promise((resolve) => setTimeout(resolve, buildMs));
  return { pid: process.pid, item, placedAt: Date.now() };
}

@Controller()
class OrdersController {
  @Post('plain/orders')
  @HttpCode(201)
  plain(@Headers('idempotency-key') key: string, @Body() body: { item: unknown }): Promise<object> {
    return place(`plain:${key}`, body.item);
  }

  @Post('throw/orders')
  @HttpCode(201)
  @Idempotent()
  refusing(
    @Headers('idempotency-key') key: string,
    @Body() body: { item: unknown },
  ): Promise<object> {
    return place(`throw:${key}`, body.item);
  }

  @Post('wait/orders')
  @HttpCode(201)
  @Idempotent({ onBusy: 'wait' })
  waiting(
    @Headers('idempotency-key') key: string,
    @Body() body: { item: unknown },
  ): Promise<object> {
    return place(`wait:${key}`, body.item);
  }

  @Get('runs')
  runs(): Record<string, number> {
    return runs;
  }
}

@Module({
  imports: [
    BufferLockModule.forRoot({
      redis: `redis://127.0.0.1:${process.env['BENCH_REDIS_PORT']}`,
      namespace: 'bench:idempotency:',
      logger: { log() {}, warn() {}, error() {} },
    }),
  ],
  controllers: [OrdersController],
})
class IdempotencyBenchModule {}

const app = await NestFactory.create(IdempotencyBenchModule, { logger: false });
await app.listen(0, '127.0.0.1');
process.send!({ port: Number(new URL(await app.getUrl()).port) });
process.on('disconnect', () => void app.close().then(() => process.exit(0)));
