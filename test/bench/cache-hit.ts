// A fresh hit of one key, as an app makes it: a Nest application context of one build of the
// library (this one, or `--baseline`'s) with BufferLockModule on the built-in store, read through
// BufferCache.getOrSet or a @Cached method, with or without `l1`. Sections 6 and 10 count and
// time the same calls for both builds.
import 'reflect-metadata';
import { pathToFileURL } from 'node:url';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

type Library = typeof import('../../lib/index.js');

export const HIT_ROWS = [
  'BufferCache hit',
  'BufferCache hit, l1',
  '@Cached hit',
  '@Cached hit, l1',
] as const;
export type HitRow = (typeof HIT_ROWS)[number];

export const isHitRow = (name: string): name is HitRow => HIT_ROWS.includes(name as HitRow);

export interface CacheHit {
  readonly call: () => Promise<unknown>;
  readonly close: () => Promise<void>;
}

const TTL_S = 3600;
/** Longer than any run (valgrind slows one many times): every l1 hit is a copy held. */
const L1 = { maxEntries: 10_000, maxAge: 3600 };
const build = (): object => ({ id: 42, name: 'hot key', tags: ['a', 'b', 'c'], price: 9.99 });
let apps = 0;

/**
 * `row` on the build whose `index.js` is `entry` (this build when none), on the Redis at `port`;
 * the key is written by the first call, so every later call is a fresh hit.
 */
export async function cacheHit(row: HitRow, port: number, entry?: string): Promise<CacheHit> {
  const lib = (await import(entry ? pathToFileURL(entry).href : '../../lib/index.js')) as Library;
  class Items {
    item(): object {
      return build();
    }
  }
  // The decorator of the build measured, applied as `@Cached('hit', { ttl })` would be.
  const method = Object.getOwnPropertyDescriptor(Items.prototype, 'item')!;
  lib.Cached('hit', { ttl: TTL_S })(Items.prototype, 'item', method as never);
  Object.defineProperty(Items.prototype, 'item', method);
  Injectable()(Items);
  // oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class is empty
  class HitModule {}
  Module({
    imports: [
      lib.BufferLockModule.forRoot({
        redis: `redis://127.0.0.1:${port}`,
        // Processes and builds side by side on one Redis: entries and channels of their own.
        namespace: `bench:hit:${process.pid}:${apps++}:`,
        ...(row.endsWith('l1') ? { l1: L1 } : {}),
      }),
    ],
    providers: [Items],
  })(HitModule);
  const app: INestApplicationContext = await NestFactory.createApplicationContext(HitModule, {
    logger: false,
  });
  const cache = app.get(lib.BufferCache);
  const items = app.get(Items);
  return {
    call: row.startsWith('@Cached')
      ? () => items.item() as unknown as Promise<unknown>
      : () => cache.getOrSet('hit', build, { ttl: TTL_S }),
    close: () => app.close(),
  };
}
