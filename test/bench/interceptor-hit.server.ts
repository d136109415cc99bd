// One HTTP app (Express) whose route sits under BufferCacheInterceptor, on one build of the
// library: this one, or the `--baseline` build whose `index.js` is BENCH_LIB_ENTRY. Every request
// asks for one URL, so each is a hit of its URL key after the first. Runs under callgrind
// (instructions.bench.ts); sends its port over IPC once listening.
import 'reflect-metadata';
import { pathToFileURL } from 'node:url';
import { CacheTTL } from '@nestjs/cache-manager';
import { Controller, Get, Module, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

type Library = typeof import('../../lib/index.js');

const entry = process.env['BENCH_LIB_ENTRY'];
const lib = (await import(entry ? pathToFileURL(entry).href : '../../lib/index.js')) as Library;
const port = Number(process.env['BENCH_REDIS_PORT']);

@Controller()
class ItemController {
  @Get('item/:id')
  @UseInterceptors(lib.BufferCacheInterceptor)
  @CacheTTL(3_600_000)
  item(): object {
    return { id: 'item', name: 'the item every request asks for', tags: ['a', 'b'], price: 42.5 };
  }
}

@Module({
  imports: [
    lib.BufferLockModule.forRoot({
      // Under valgrind a command can take longer than the fail-fast 1 s: no hit is counted on the
      // timeout path.
      redis: { host: '127.0.0.1', port, commandTimeout: 60_000 },
      // Builds side by side on one Redis: entries of their own.
      namespace: `bench:interceptor:${process.pid}:`,
    }),
  ],
  controllers: [ItemController],
})
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
class InterceptorHitModule {}

const app = await NestFactory.create(InterceptorHitModule, { logger: false });
await app.listen(0, '127.0.0.1');
process.send!({ port: Number(new URL(await app.getUrl()).port) });
