import { CACHE_MANAGER, CacheModule } from '@nestjs/cache-manager';
import { Test, type TestingModule } from '@nestjs/testing';
import KeyvRedis from '@keyv/redis';
import { createCache, type Cache } from 'cache-manager';
import type { Redis } from 'ioredis';
import Keyv from 'keyv';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import ts from 'typescript';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { refusedWith } from '../support/refused.js';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  ENGLISH_MESSAGES,
  type BufferLockOptions,
  type MessageId,
} from '../../lib/index.js';
import { commandStats } from '../support/command-stats.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

// Two servers: the cache store's (Keyv on @keyv/redis) and the lock's, so each one's command
// counts say who asked it.
let storeServer: RedisServer;
let lockServer: RedisServer;
let storeAdmin: Redis;
let lockAdmin: Redis;
beforeAll(async () => {
  [storeServer, lockServer] = await Promise.all([startRedis(), startRedis()]);
  storeAdmin = storeServer.client();
  lockAdmin = lockServer.client();
});
afterAll(async () => {
  await Promise.all([storeServer?.stop(), lockServer?.stop()]);
});

/** What a test opened (apps, Keyv connections), closed after it. */
const opened: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const close of opened.splice(0).toReversed()) await close().catch(() => undefined);
});

let n = 0;
const key = (): string => `stores:report:${++n}`;
/** Where an entry of `k` sits in a store: under the cache's prefix, `cachePrefix`. */
const inStore = (k: string): string => `buffer:cache:${k}`;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A Keyv instance on @keyv/redis against the store server. */
function redisKeyv(): Keyv {
  const keyv = new Keyv({ store: new KeyvRedis(storeServer.url) });
  opened.push(() => keyv.disconnect());
  return keyv;
}

async function compile(imports: unknown[]): Promise<TestingModule> {
  const ref = await Test.createTestingModule({ imports: imports as never[] }).compile();
  opened.push(() => ref.close());
  return ref;
}

/** A Nest app whose BufferCache keeps its entries in `cache`, its locks on the lock server. */
async function appWith(cache: object, options: Partial<BufferLockOptions> = {}) {
  const ref = await compile([
    BufferLockModule.forRoot({
      redis: lockServer.url,
      cache,
      logger: new MemoryLogger(),
      ...options,
    }),
  ]);
  return ref.get(BufferCache);
}

/** The commands each server ran while `run` ran, by name (INFO commandstats). */
async function commandsDuring(
  run: () => Promise<unknown>,
): Promise<{ lock: Record<string, number>; store: Record<string, number> }> {
  const admins = [lockAdmin, storeAdmin] as const;
  const before = await Promise.all(admins.map((admin) => commandStats(admin)));
  await run();
  const after = await Promise.all(admins.map((admin) => commandStats(admin)));
  const [lock, store] = after.map((stats, i) => {
    const delta: Record<string, number> = {};
    for (const [name, calls] of stats) {
      const d = calls - (before[i]!.get(name) ?? 0);
      if (d > 0 && name !== 'info') delta[name] = d;
    }
    return delta;
  });
  return { lock: lock!, store: store! };
}

/** The one key on the store server that ends with `k` (Keyv puts its namespace in front). */
async function storeKeyOf(k: string): Promise<string> {
  const keys = await storeAdmin.keys(`*${k}`);
  expect(keys).toHaveLength(1);
  expect(keys[0]!.endsWith(k)).toBe(true);
  expect(keys[0]!.length).toBeGreaterThan(k.length);
  return keys[0]!;
}

/** `freshUntil:staleUntil:deltaMs:keyLength:key payload`, read back as its parts. */
function entryParts(text: unknown): { freshUntil: number; staleUntil: number; payload: string } {
  expect(typeof text).toBe('string');
  const match = /^(\d+):(\d+):\d+:(\d+):(.*)$/s.exec(text as string);
  expect(match).not.toBeNull();
  const payload = match![4]!.slice(Number(match![3]));
  return { freshUntil: Number(match![1]), staleUntil: Number(match![2]), payload };
}

/**
 * The checks every store gets: 20 concurrent callers on a cold key build once; the next call is
 * a hit that asks nothing of the lock's Redis; `readBack` (the store itself) holds the entry text,
 * fresh for `expected.ttl` and stale for `expected.grace` more. `options`: the calls' own.
 */
async function buildsOnceThenHits(
  cache: BufferCache,
  k: string,
  readBack: (k: string) => Promise<unknown>,
  expected: { ttl: number; grace: number },
  options?: { ttl: number; grace: number },
): Promise<void> {
  let builds = 0;
  const events: string[] = [];
  for (const name of ['hit', 'miss', 'built', 'shared'] as const) {
    cache.on(name, (at) => at === k && events.push(name));
  }
  const factory = async () => {
    builds++;
    await sleep(50);
    return { total: 42, k };
  };
  const startedAt = Date.now();
  const miss = await commandsDuring(async () => {
    const values = await Promise.all(
      Array.from({ length: 20 }, () => cache.getOrSet(k, factory, options)),
    );
    expect(values).toEqual(Array.from({ length: 20 }, () => ({ total: 42, k })));
  });
  expect(builds).toBe(1);
  expect(events.filter((e) => e === 'built')).toEqual(['built']);
  // The build took the lock (SET NX), claimed it (SET, in a script) and released it (script) on
  // the lock's server…
  expect(miss.lock.set).toBe(2);
  expect((miss.lock.evalsha ?? 0) + (miss.lock.eval ?? 0)).toBeGreaterThanOrEqual(1);
  // …and wrote its entry to the store's server, with a TTL.
  expect(miss.store.set).toBe(1);

  events.length = 0;
  const hit = await commandsDuring(async () => {
    expect(await cache.getOrSet(k, factory, options)).toEqual({ total: 42, k });
  });
  expect(builds).toBe(1);
  expect(events).toEqual(['hit']);
  // A hit is one store read (a GET on the store's server); the lock's server is not asked at all.
  expect(hit.store).toEqual({ get: 1 });
  expect(hit.lock).toEqual({});
  expect(hit.lock.set).toBeUndefined();
  expect(hit.lock.evalsha).toBeUndefined();
  expect(hit.lock.eval).toBeUndefined();

  const stored = entryParts(await readBack(k));
  expect(JSON.parse(stored.payload)).toEqual({ total: 42, k });
  const { ttl, grace } = expected;
  expect(stored.staleUntil - stored.freshUntil).toBe(grace * 1000);
  expect(stored.freshUntil).toBeGreaterThanOrEqual(startedAt + ttl * 1000);
  expect(stored.freshUntil).toBeLessThanOrEqual(Date.now() + ttl * 1000);
}

/** PTTL of the entry on the store server: (ttl + grace) seconds, in milliseconds. */
async function expectStoreTtl(k: string, seconds: number): Promise<void> {
  const pttl = await storeAdmin.pttl(await storeKeyOf(k));
  expect(pttl).toBeLessThanOrEqual(seconds * 1000);
  expect(pttl).toBeGreaterThan(seconds * 1000 - 5000);
}

describe('@nestjs/cache-manager with a Keyv store on @keyv/redis', () => {
  it('CACHE_MANAGER as the cache: built once for 20 callers, hits run no lock command, the entry and its TTL are in the store', async () => {
    const keyv = redisKeyv();
    const ref = await compile([
      BufferLockModule.forRootAsync({
        imports: [CacheModule.register({ stores: [keyv] })],
        inject: [CACHE_MANAGER],
        useFactory: (cache: Cache) => ({
          redis: lockServer.url,
          cache,
          cacheDefaults: { ttl: 30, grace: 15 },
          logger: new MemoryLogger(),
        }),
      }),
    ]);
    const cache = ref.get(BufferCache);
    const manager = ref.get<Cache>(CACHE_MANAGER, { strict: false });
    // The store given to the module is cache-manager's own Cache (adapted: it has del, no delete).
    expect(typeof manager.del).toBe('function');
    expect((manager as unknown as Record<string, unknown>).delete).toBeUndefined();

    const k = key();
    // No per-call options: the module's cacheDefaults (ttl 30, grace 15) apply.
    await buildsOnceThenHits(cache, k, (at) => manager.get(inStore(at)), { ttl: 30, grace: 15 });
    // cache-manager was given (ttl + grace) in milliseconds: 45 000.
    await expectStoreTtl(k, 45);

    // delete() goes through cache-manager's del: the entry is gone from the store.
    await cache.delete(k);
    expect(await manager.get(inStore(k))).toBeUndefined();
    expect(await storeAdmin.keys(`*${k}`)).toEqual([]);
  });

  it('module cacheDefaults with no per-call options reach cache-manager as (ttl + grace) ms', async () => {
    const keyv = redisKeyv();
    const ref = await compile([
      BufferLockModule.forRootAsync({
        imports: [CacheModule.register({ stores: [keyv] })],
        inject: [CACHE_MANAGER],
        useFactory: (cache: Cache) => ({
          redis: lockServer.url,
          cache,
          cacheDefaults: { ttl: 20, grace: 100 },
          logger: new MemoryLogger(),
        }),
      }),
    ]);
    const cache = ref.get(BufferCache);
    const manager = ref.get<Cache>(CACHE_MANAGER, { strict: false });
    const k = key();
    let builds = 0;
    expect(await cache.getOrSet(k, () => ++builds)).toBe(1);
    expect(await cache.getOrSet(k, () => ++builds)).toBe(1);
    const stored = entryParts(await manager.get(inStore(k)));
    expect(stored.staleUntil - stored.freshUntil).toBe(100_000);
    await expectStoreTtl(k, 120);
  });
});

describe('a plain Keyv instance on @keyv/redis as the cache', () => {
  it('is used as it is: built once for 20 callers, hits run no lock command, the entry and its TTL are in Redis', async () => {
    const keyv = redisKeyv();
    const cache = await appWith(keyv);
    const k = key();
    const options = { ttl: 10, grace: 5 };
    await buildsOnceThenHits(cache, k, (at) => keyv.get(inStore(at)), options, options);
    await expectStoreTtl(k, 15);

    // set() writes a fresh entry with the TTL of its options; get() reads it.
    const other = key();
    await cache.set(other, 'direct', { ttl: 2 });
    expect(await cache.get(other)).toBe('direct');
    await expectStoreTtl(other, 2);

    await cache.delete(k);
    expect(await keyv.get(inStore(k))).toBeUndefined();
    expect(await cache.get(k)).toBeUndefined();
  });

  it('an entry that expires in the store is built again', async () => {
    const keyv = redisKeyv();
    const cache = await appWith(keyv);
    const k = key();
    let builds = 0;
    expect(await cache.getOrSet(k, () => ++builds, { ttl: 0.15 })).toBe(1);
    expect(await cache.getOrSet(k, () => ++builds, { ttl: 0.15 })).toBe(1);
    await sleep(250);
    expect(await storeAdmin.keys(`*${k}`)).toEqual([]);
    expect(await cache.getOrSet(k, () => ++builds, { ttl: 0.15 })).toBe(2);
  });
});

describe("cache-manager's in-memory default", () => {
  it('createCache() with no stores: built once, then a hit, the entry held with (ttl + grace) ms', async () => {
    const memory = createCache();
    const cache = await appWith(memory);
    const k = key();
    let builds = 0;
    const before = Date.now();
    const values = await Promise.all(
      Array.from({ length: 20 }, () =>
        cache.getOrSet(
          k,
          async () => {
            builds++;
            await sleep(20);
            return ['a', builds];
          },
          { ttl: 3, grace: 4 },
        ),
      ),
    );
    expect(values).toEqual(Array.from({ length: 20 }, () => ['a', 1]));
    const hit = await commandsDuring(async () => {
      expect(await cache.getOrSet(k, () => ['b', ++builds], { ttl: 3, grace: 4 })).toEqual([
        'a',
        1,
      ]);
    });
    expect(builds).toBe(1);
    expect(hit.lock).toEqual({});
    expect(hit.store).toEqual({});
    const stored = entryParts(await memory.get(inStore(k)));
    expect(JSON.parse(stored.payload)).toEqual(['a', 1]);
    // cache-manager's ttl(key) is the expiry time in epoch ms: now + 7 s.
    const expires = await memory.ttl(inStore(k));
    expect(expires).toBeGreaterThanOrEqual(before + 7000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 7000);
    await cache.delete(k);
    expect(await memory.get(inStore(k))).toBeUndefined();
  });

  it('CacheModule.register() with its defaults, injected as CACHE_MANAGER', async () => {
    const ref = await compile([
      BufferLockModule.forRootAsync({
        imports: [CacheModule.register()],
        inject: [CACHE_MANAGER],
        useFactory: (cache: Cache) => ({
          redis: lockServer.url,
          cache,
          logger: new MemoryLogger(),
        }),
      }),
    ]);
    const cache = ref.get(BufferCache);
    const manager = ref.get<Cache>(CACHE_MANAGER, { strict: false });
    const k = key();
    let builds = 0;
    const values = await Promise.all(
      Array.from({ length: 20 }, () => cache.getOrSet(k, async () => (await sleep(20), ++builds))),
    );
    expect(values).toEqual(Array(20).fill(1));
    expect(await cache.getOrSet(k, () => ++builds)).toBe(1);
    expect(builds).toBe(1);
    const stored = entryParts(await manager.get(inStore(k)));
    expect(stored.payload).toBe('1');
    expect(stored.staleUntil).toBe(stored.freshUntil);
  });
});

describe('one prefix on every store', () => {
  it("getOrSet('cart:abc') leaves another component's cart:abc alone, in Keyv and cache-manager", async () => {
    const keyv = redisKeyv();
    const memory = createCache();
    for (const [store, read] of [
      [keyv, (k: string) => keyv.get(k)],
      [memory, (k: string) => memory.get(k)],
    ] as const) {
      await store.set('cart:abc', 'the cart of another component', 60_000);
      const cache = await appWith(store);
      expect(await cache.getOrSet('cart:abc', () => 'cached', { ttl: 60 })).toBe('cached');
      await cache.set('cart:abc', 'set', { ttl: 60 });
      await cache.delete('cart:abc');
      expect(await read('cart:abc')).toBe('the cart of another component');
    }
  });

  it("cachePrefix: '' writes under the key as given, for the store and the built-in one alike", async () => {
    const keyv = redisKeyv();
    const cache = await appWith(keyv, { cachePrefix: '' });
    await cache.set('plain:key', 'value', { ttl: 60 });
    expect(entryParts(await keyv.get('plain:key')).payload).toBe('"value"');
    const builtIn = await appWith(undefined as never, { cachePrefix: '', namespace: 'bare:' });
    await builtIn.set('plain:key', 'value', { ttl: 60 });
    expect(await builtIn.get('plain:key')).toBe('value');
    // The entry is the lock key's slot prefix alone: `{bare:<md5>}`.
    expect(await lockAdmin.keys('*bare:*')).toEqual([
      expect.stringMatching(/^\{bare:[0-9a-f]{32}\}$/),
    ]);
  });
});

describe('two processes sharing one Keyv Redis store', () => {
  it('2 × 20 concurrent callers on a cold key: exactly one build, the waiters get its value', async () => {
    // Each "process": its own Nest app, its own lock client and its own Keyv connection.
    const caches = [await appWith(redisKeyv()), await appWith(redisKeyv())];
    const k = key();
    const builds: number[] = [];
    const events: string[] = [];
    caches.forEach((cache, i) => {
      cache.on('built', () => events.push(`built:${i}`));
      cache.on('shared', () => events.push(`shared:${i}`));
    });
    const values = await Promise.all(
      caches.flatMap((cache, i) =>
        Array.from({ length: 20 }, () =>
          cache.getOrSet(k, async () => {
            builds.push(i);
            await sleep(150);
            return { by: i, at: 'built once' };
          }),
        ),
      ),
    );
    expect(builds).toHaveLength(1);
    const builder = builds[0]!;
    expect(values).toEqual(Array.from({ length: 40 }, () => ({ by: builder, at: 'built once' })));
    expect(events.toSorted()).toEqual([`built:${builder}`, `shared:${1 - builder}`].toSorted());
    // Both processes now hit the one entry.
    for (const cache of caches) {
      expect(await cache.getOrSet(k, () => ({ by: -1, at: 'again' }))).toEqual({
        by: builder,
        at: 'built once',
      });
    }
    expect(builds).toHaveLength(1);
  });
});

describe('bad cache options at bootstrap', () => {
  const cases: [string, Partial<Record<keyof BufferLockOptions, unknown>>, MessageId][] = [
    ['cache: 42', { cache: 42 }, 'cache_store_invalid'],
    [
      'cache: an object without delete() or del()',
      { cache: { get() {}, set() {} } },
      'cache_store_invalid',
    ],
    ["cachePrefix: 'a{b}'", { cachePrefix: 'a{b}' }, 'cache_prefix_invalid'],
    ['cachePrefix: 5', { cachePrefix: 5 }, 'cache_prefix_invalid'],
    ['cacheDefaults: { ttl: 0 }', { cacheDefaults: { ttl: 0 } }, 'cache_ttl_invalid'],
    ['cacheDefaults: { grace: -1 }', { cacheDefaults: { grace: -1 } }, 'cache_grace_invalid'],
    ["cacheDefaults: 'x'", { cacheDefaults: 'x' }, 'cache_defaults_invalid'],
  ];
  for (const [name, bad, code] of cases) {
    it(`${name} stops the app with one BufferLockConfigError: ${code}`, async () => {
      const error: unknown = await compile([
        BufferLockModule.forRootAsync({
          useFactory: () => ({ redis: lockServer.url, ...bad }) as BufferLockOptions,
        }),
      ]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(BufferLockConfigError);
      const config = error as BufferLockConfigError;
      expect(config.code).toBe(code);
      expect(config.violations.map((v) => v.code)).toEqual([code]);
      expect(config.message).toEqual(refusedWith(ENGLISH_MESSAGES[code]));
    });
  }

  it('the same options, valid, start the app', async () => {
    const cache = await appWith(redisKeyv(), {
      cachePrefix: 'ab:',
      cacheDefaults: { ttl: 1, grace: 0 },
    });
    expect(cache).toBeInstanceOf(BufferCache);
  });
});

const ROOT = new URL('../..', import.meta.url).pathname;
const LIB = join(ROOT, 'lib');
const OPTIONAL_PEERS = /^(?:@nestjs\/cache-manager|cache-manager|keyv|@keyv\/[^/]+)(?:\/|$)/;

const libSources = (): string[] =>
  readdirSync(LIB, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.d.ts'))
    .map((file) => join(LIB, file))
    .toSorted();

/** The JavaScript tsc emits for `source`: type-only imports are erased, the others kept. */
const transpile = (source: string, fileName: string): string =>
  ts.transpileModule(source, {
    fileName,
    compilerOptions: {
      target: ts.ScriptTarget.ES2023,
      module: ts.ModuleKind.ESNext,
      experimentalDecorators: true,
      emitDecoratorMetadata: true,
      useDefineForClassFields: false,
      esModuleInterop: true,
    },
  }).outputText;

/** {@link transpile}, once per source (two tests read lib/). */
const emitted = new Map<string, string>();
const emit = (source: string, fileName: string): string => {
  const known = emitted.get(source);
  if (known !== undefined) return known;
  const js = transpile(source, fileName);
  emitted.set(source, js);
  return js;
};

/** Every module the emitted code loads: static, re-exported, dynamic and required. */
const loadedModules = (js: string): string[] =>
  ts.preProcessFile(js, true, true).importedFiles.map((file) => file.fileName);

const optionalPeersIn = (source: string, fileName = 'probe.ts'): string[] =>
  loadedModules(emit(source, fileName)).filter((name) => OPTIONAL_PEERS.test(name));

describe('the package without its optional peers', () => {
  it('the check tells a runtime import of a peer from a type-only one', () => {
    expect(optionalPeersIn(`import { Keyv } from 'keyv';\nexport const k = new Keyv();`)).toEqual([
      'keyv',
    ]);
    expect(optionalPeersIn(`export { CACHE_MANAGER } from '@nestjs/cache-manager';`)).toEqual([
      '@nestjs/cache-manager',
    ]);
    expect(optionalPeersIn(`export const load = () => import('cache-manager');`)).toEqual([
      'cache-manager',
    ]);
    expect(optionalPeersIn(`import '@keyv/redis';`)).toEqual(['@keyv/redis']);
    expect(
      optionalPeersIn(
        `import type { Keyv } from 'keyv';\nimport { type Cache } from 'cache-manager';\n` +
          `export let a: Keyv | Cache | import('@keyv/redis').default | undefined;`,
      ),
    ).toEqual([]);
  });

  it('no file in lib/ loads @nestjs/cache-manager, cache-manager or keyv at run time', () => {
    const files = libSources();
    expect(files.length).toBeGreaterThan(20);
    expect(files).toContain(join(LIB, 'cache', 'cache-store.ts'));
    const offending = files.flatMap((file) =>
      optionalPeersIn(readFileSync(file, 'utf8'), file).map(
        (name) => `${relative(ROOT, file)} → ${name}`,
      ),
    );
    expect(offending).toEqual([]);
  });

  it('lib/index loads, and a BufferCache works on the built-in store, when the peers cannot be resolved', () => {
    mkdirSync(join(ROOT, '.build'), { recursive: true });
    const out = mkdtempSync(join(ROOT, '.build', 'peerless-'));
    try {
      for (const file of libSources()) {
        const target = join(out, relative(ROOT, file)).replace(/\.ts$/, '.js');
        mkdirSync(dirname(target), { recursive: true });
        writeFileSync(target, emit(readFileSync(file, 'utf8'), file));
      }
      // The same resolve hook, synchronous where Node has registerHooks (module.register() is
      // deprecated from Node 26 on), asynchronous through module.register() before.
      const hook =
        `const PEERS = ${OPTIONAL_PEERS};\n` +
        'export function resolve(name, context, next) {\n' +
        '  if (PEERS.test(name)) {\n' +
        '    const error = new Error(`Cannot find package ${name}`);\n' +
        "    error.code = 'ERR_MODULE_NOT_FOUND';\n" +
        '    throw error;\n' +
        '  }\n' +
        '  return next(name, context);\n' +
        '}\n';
      writeFileSync(join(out, 'refuse-peers.mjs'), hook);
      writeFileSync(
        join(out, 'register.mjs'),
        "import * as module from 'node:module';\n" +
          "import { resolve } from './refuse-peers.mjs';\n" +
          'if (module.registerHooks) module.registerHooks({ resolve });\n' +
          "else module.register('./refuse-peers.mjs', import.meta.url);\n",
      );
      const index = pathToFileURL(join(out, 'lib', 'index.js')).href;
      const program = [
        "import 'reflect-metadata';",
        "import { Redis } from 'ioredis';",
        "const refused = await import('keyv').then(() => 'loaded', (e) => e.code);",
        `const lib = await import(${JSON.stringify(index)});`,
        'const client = new Redis(process.env.LOCK_URL);',
        "const lock = new lib.RedisLockService({ redis: client, namespace: 'peerless:' });",
        'const cache = new lib.BufferCache({ lock });',
        'let builds = 0;',
        "const first = await cache.getOrSet('k', () => ++builds);",
        "const second = await cache.getOrSet('k', () => ++builds);",
        'client.disconnect();',
        'console.log(JSON.stringify({ refused, first, second, builds,',
        '  exports: ["BufferLockModule", "BufferCache"].map((name) => typeof lib[name]) }));',
      ].join('\n');
      const child = spawnSync(
        process.execPath,
        [
          '--import',
          pathToFileURL(join(out, 'register.mjs')).href,
          '--input-type=module',
          '-e',
          program,
        ],
        {
          cwd: ROOT,
          encoding: 'utf8',
          env: { ...process.env, LOCK_URL: lockServer.url },
          timeout: 20_000,
        },
      );
      expect(child.stderr).toBe('');
      expect(child.status).toBe(0);
      expect(JSON.parse(child.stdout)).toEqual({
        refused: 'ERR_MODULE_NOT_FOUND',
        first: 1,
        second: 1,
        builds: 1,
        exports: ['function', 'function'],
      });
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});
