/**
 * Per-call overhead of @SingleFlight against a bare method, on one Redis (REDIS_URL, default the
 * local redis://127.0.0.1:6379), uncontended, calls one after another, interleaved so that both
 * see the same machine load. Also shows the floor: RedisLockService acquire+release by hand.
 *
 *   npx tsc -p test/bench/tsconfig.json && node .build/test/bench/decorator-overhead.js [calls]
 */
import 'reflect-metadata';
import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { BufferLockModule, RedisLockService, SingleFlight } from '../../lib/index.js';

@Injectable()
class Subject {
  constructor(@Inject(RedisLockService) readonly lock: RedisLockService) {}

  async bare(n: number): Promise<number> {
    return n + 1;
  }

  @SingleFlight('overhead')
  async locked(n: number): Promise<number> {
    return n + 1;
  }

  async byHand(n: number): Promise<number> {
    const [guard] = await this.lock.acquire('overhead-by-hand');
    try {
      return n + 1;
    } finally {
      if (guard) await this.lock.release(guard);
    }
  }
}

const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

@Module({
  imports: [
    BufferLockModule.forRoot({ redis: () => new Redis(url), namespace: 'bench:overhead:' }),
  ],
  providers: [Subject],
})
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module is an empty class with metadata
class BenchModule {}

const quantile = (sorted: number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

async function main(): Promise<void> {
  const calls = Number(process.argv[2] ?? 5000);
  const app = await NestFactory.createApplicationContext(BenchModule, { logger: false });
  const subject = app.get(Subject);
  const variants = {
    bare: (n: number) => subject.bare(n),
    '@SingleFlight': (n: number) => subject.locked(n),
    'acquire+release by hand': (n: number) => subject.byHand(n),
  };
  const samples: Record<string, number[]> = Object.fromEntries(
    Object.keys(variants).map((name) => [name, []]),
  );
  for (let i = 0; i < 500; i++) for (const run of Object.values(variants)) await run(i); // warm-up
  for (let i = 0; i < calls; i++) {
    for (const [name, run] of Object.entries(variants)) {
      const start = process.hrtime.bigint();
      await run(i);
      samples[name]!.push(Number(process.hrtime.bigint() - start) / 1000);
    }
  }
  await app.close();
  console.log(`${calls} sequential calls each, interleaved; Redis ${new URL(url).host}; µs`);
  console.log('variant                    median      p99');
  for (const [name, values] of Object.entries(samples)) {
    const sorted = values.toSorted((a, b) => a - b);
    console.log(
      `${name.padEnd(24)} ${quantile(sorted, 0.5).toFixed(1).padStart(8)} ${quantile(sorted, 0.99).toFixed(1).padStart(8)}`,
    );
  }
}

await main();
