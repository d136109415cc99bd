import { Test, type TestingModule } from '@nestjs/testing';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { inspect } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockModule,
  connectFailFast,
  RedisLockService,
  SingleFlightEngine,
  type BufferLockOptions,
} from '../../lib/index.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { MemoryLogger } from '../support/nest-helpers.js';
import { freePort, startRedis, type RedisServer } from '../support/redis-server.js';
import { fuzzParameters, notCatalogError } from './fuzz.js';

/**
 * A Redis that demands a random password (URL-special characters among them, percent-encoded in
 * URLs), reached by clients made every way (module URL, module ioredis options, a factory of
 * ioredis clients, connectFailFast, a wrong password, a refused port): acquire, release, extend,
 * engine.run and BufferCache.getOrSet, before and after Redis stops taking the password, never
 * put a password into an error (its text, `util.inspect`, its cause chain) or a log line.
 */

const FILE = 'test/fuzz/secrets.spec.ts';
const escaped = collectEscapes();
let server: RedisServer;
let admin: Redis;
let refusedPort: number;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  // The admin connection stays signed in while the password changes under it.
  await admin.config('SET', 'requirepass', 'the-first-password-of-the-run');
  refusedPort = await freePort();
});
afterAll(async () => {
  await admin.config('SET', 'requirepass', '');
  await server.stop();
});

const SPECIAL = [
  '@',
  ':',
  '/',
  '?',
  '#',
  '%',
  '&',
  '+',
  ' ',
  '=',
  '"',
  "'",
  '\\',
  '%40',
  'é',
  '🔑',
];

/** At least 8 letters or digits (no chance text), with URL-special characters between them. */
const password: fc.Arbitrary<string> = fc
  .array(fc.tuple(fc.stringMatching(/^[A-Za-z0-9]{2,4}$/), fc.constantFrom('', ...SPECIAL)), {
    minLength: 4,
    maxLength: 8,
  })
  .map((parts) => parts.flat().join(''));

const urlOf = (secret: string, port: number): string =>
  `redis://:${encodeURIComponent(secret)}@127.0.0.1:${port}`;

/** Everything an error shows: its text, its inspection, and each cause's message and stack. */
function shown(error: unknown): string {
  const texts = [String(error), inspect(error, { depth: 10 })];
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 10; depth++) {
    texts.push(e.message, e.stack ?? '');
    e = e.cause;
  }
  return texts.join('\n');
}

/** A way to reach Redis, and whether it is given the right password. */
interface Way {
  readonly name: string;
  readonly right: boolean;
  readonly make: (secrets: Secrets, logger: MemoryLogger) => Promise<Parts>;
}

interface Secrets {
  readonly right: string;
  readonly wrong: string;
}

interface Parts {
  readonly lock: RedisLockService;
  readonly engine: SingleFlightEngine;
  readonly cache: BufferCache;
  readonly close: () => Promise<void>;
}

let serial = 0;

async function viaModule(redis: BufferLockOptions['redis'], logger: MemoryLogger): Promise<Parts> {
  const module: TestingModule = await Test.createTestingModule({
    imports: [
      BufferLockModule.forRoot({ redis, logger, namespace: `secret:${++serial}:`, lockTimeout: 1 }),
    ],
  }).compile();
  return {
    lock: module.get(RedisLockService),
    engine: module.get(SingleFlightEngine),
    cache: module.get(BufferCache),
    close: () => module.close(),
  };
}

function direct(redis: () => Redis | Promise<Redis>, logger: MemoryLogger): Parts {
  const made: Redis[] = [];
  const lock = new RedisLockService({
    redis: async () => {
      const client = await redis();
      made.push(client);
      return client;
    },
    namespace: `secret:${++serial}:`,
  });
  const engine = new SingleFlightEngine({ lock, options: { logger, lockTimeout: 1 } });
  const cache = new BufferCache({ lock, engine, options: { logger, lockTimeout: 1 } });
  return {
    lock,
    engine,
    cache,
    close: async () => {
      engine.close();
      for (const client of made) client.disconnect();
    },
  };
}

/** An ioredis client that neither retries nor reconnects, with the errors it emits dropped. */
const plainClient = (url: string): Redis => {
  const client = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => {});
  return client;
};

const WAYS: readonly Way[] = [
  {
    name: "module redis: 'redis://:pw@host:port'",
    right: true,
    make: (s, logger) => viaModule(urlOf(s.right, server.port), logger),
  },
  {
    name: 'module redis: { host, port, password }',
    right: true,
    make: (s, logger) =>
      viaModule({ host: '127.0.0.1', port: server.port, password: s.right }, logger),
  },
  {
    name: 'redis: () => new Redis(url)',
    right: true,
    make: async (s, logger) => direct(() => plainClient(urlOf(s.right, server.port)), logger),
  },
  {
    name: 'redis: () => connectFailFast(url)',
    right: true,
    make: async (s, logger) => direct(() => connectFailFast(urlOf(s.right, server.port)), logger),
  },
  {
    name: 'module URL with a wrong password',
    right: false,
    make: (s, logger) => viaModule(urlOf(s.wrong, server.port), logger),
  },
  {
    name: 'connectFailFast with a wrong password',
    right: false,
    make: async (s, logger) => direct(() => connectFailFast(urlOf(s.wrong, server.port)), logger),
  },
  {
    name: 'new Redis(url) with a wrong password',
    right: false,
    make: async (s, logger) => direct(() => plainClient(urlOf(s.wrong, server.port)), logger),
  },
  {
    name: 'module options with a wrong password',
    right: false,
    make: (s, logger) =>
      viaModule({ host: '127.0.0.1', port: server.port, password: s.wrong }, logger),
  },
  {
    name: 'module URL with the password, refused port',
    right: false,
    make: (s, logger) => viaModule(urlOf(s.right, refusedPort), logger),
  },
  {
    name: 'connectFailFast with the password, refused port',
    right: false,
    make: async (s, logger) => direct(() => connectFailFast(urlOf(s.right, refusedPort)), logger),
  },
];

/** Every call of the public API that reaches Redis; each error goes to `seen`. */
async function exercise(parts: Parts, key: string, seen: (error: unknown) => void): Promise<void> {
  const { lock, engine, cache } = parts;
  const [guard, acquireError] = await lock.acquire(key);
  if (acquireError) seen(acquireError);
  const target = guard ?? { key: lock.redisKey(key), token: 'not-held' };
  const [, extendError] = await lock.extend(target, 5);
  if (extendError) seen(extendError);
  const [, releaseError] = await lock.release(target);
  if (releaseError) seen(releaseError);
  for (const onRedisError of ['proceed', 'throw'] as const) {
    await engine.run(`${key}:run`, () => 'built', { onRedisError }).catch(seen);
    await engine.run(`${key}:shared`, () => 'built', { onRedisError, share: true }).catch(seen);
  }
  await cache.getOrSet(`${key}:entry`, () => 'built').catch(seen);
  await cache.set(`${key}:set`, 'value').catch(seen);
  await cache.get(`${key}:set`).catch(seen);
}

const figures = { runs: 0, ways: 0, errors: 0, logLines: 0, failingWays: new Set<string>() };

describe('a Redis password in every error path', () => {
  it("ioredis's own error for a wrong password carries it (what the library must keep out)", async () => {
    const secret = 'the-wrong-one%40';
    const client = plainClient(urlOf(secret, server.port));
    const error: unknown = await client.ping().catch((e: unknown) => e);
    client.disconnect();
    expect(shown(error)).toContain(secret);
  });

  it('reaches no error, inspection, cause chain or log line, whichever way the client is made', async () => {
    await fc.assert(
      fc.asyncProperty(
        password,
        password,
        password,
        fc.string({ maxLength: 8 }),
        async (right, wrong, rotated, key) => {
          fc.pre(new Set([right, wrong, rotated]).size === 3);
          const secrets = [right, wrong, rotated].flatMap((s) => [s, encodeURIComponent(s)]);
          const leaks = (text: string): string[] => secrets.filter((s) => text.includes(s));
          await admin.config('SET', 'requirepass', right);
          const made: { way: Way; parts: Parts; logger: MemoryLogger }[] = [];
          const errors: { way: string; error: unknown }[] = [];
          for (const way of WAYS) {
            const logger = new MemoryLogger();
            const parts = await way.make({ right, wrong }, logger);
            made.push({ way, parts, logger });
            await exercise(parts, key, (error) => errors.push({ way: way.name, error }));
          }
          // Redis stops taking the password: every connection is dropped, and each reconnect
          // (with the password it was given) is refused.
          await admin.config('SET', 'requirepass', rotated);
          await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
          for (const { way, parts } of made) {
            await exercise(parts, `${key}:after`, (error) => errors.push({ way: way.name, error }));
          }
          for (const { way, error } of errors) {
            figures.errors++;
            figures.failingWays.add(way);
            expect(notCatalogError(error), way).toBeUndefined();
            expect(leaks(shown(error)), `${way}: ${shown(error)}`).toEqual([]);
          }
          for (const { way, parts, logger } of made) {
            await parts.close();
            for (const { text } of logger.lines) {
              figures.logLines++;
              expect(leaks(text), `${way.name}: ${text}`).toEqual([]);
            }
          }
          figures.ways += made.length;
          figures.runs++;
          expect(escaped).toEqual([]);
        },
      ),
      fuzzParameters(FILE, 8),
    );
    const failing = [...figures.failingWays];
    console.log('secrets fuzz', { ...figures, failingWays: failing.length });
    // Every way failed at least once, so each error path was looked at.
    expect(failing.toSorted()).toEqual(WAYS.map((w) => w.name).toSorted());
    expect(figures.logLines).toBeGreaterThan(0);
    await settle();
    expect(escaped).toEqual([]);
  }, 120_000);
});
