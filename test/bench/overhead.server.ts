// The HTTP app of the decorator-overhead benchmark, in its own process so that autocannon (in the
// parent) does not share its event loop. Two routes, the same handler body: one bare, one under
// @SingleFlight on a per-request key. Sends its port over IPC once listening.
import 'reflect-metadata';
import { Controller, Get, Module, Param } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { decorate, singleFlightApi } from './features.js';

const port = Number(process.env['BENCH_REDIS_PORT']);
// BENCH_AUTO_PIPELINING=1: ioredis options with enableAutoPipelining instead of a URL.
const redis =
  process.env['BENCH_AUTO_PIPELINING'] === '1'
    ? { host: '127.0.0.1', port, enableAutoPipelining: true }
    : `redis://127.0.0.1:${port}`;

@Controller()
class ItemsController {
  @Get('bare/:id')
  bare(@Param('id') id: string): { id: string } {
    return { id };
  }

  @Get('single-flight/:id')
  singleFlight(@Param('id') id: string): { id: string } {
    return { id };
  }
}

async function main(): Promise<void> {
  const api = await singleFlightApi();
  if (!api) {
    process.send!({ type: 'unavailable' });
    return;
  }
  // Applied after @Get: the decorator copies the route metadata onto its wrapper.
  decorate(
    ItemsController.prototype,
    'singleFlight',
    api.SingleFlight((id: string) => `item:${id}`),
  );
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  const AppModule = class {};
  Module({
    imports: [api.BufferLockModule.forRoot({ redis, namespace: 'bench:http:' })],
    controllers: [ItemsController],
  })(AppModule);
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  process.send!({ type: 'listening', port: address.port });
  process.on('message', () => void app.close().finally(() => process.exit(0)));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
