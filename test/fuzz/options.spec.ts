/* oxlint-disable unicorn/no-thenable -- thenable factories of every kind are fuzzed below */
import { Test } from '@nestjs/testing';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferCache,
  BufferLockConfigError,
  BufferLockModule,
  Cached,
  ENGLISH_MESSAGES,
  RedisLockService,
  SingleFlight,
  type BufferLockOptions,
  type RedisLockOptions,
} from '../../lib/index.js';
import { BUFFER_LOCK_OPTIONS } from '../../lib/options/buffer-lock.constants.js';
import { BufferLockOptionsDto } from '../../lib/options/buffer-lock.options.js';
import { CacheOptionsDto } from '../../lib/options/cache.options.js';
import { CircuitBreakerOptionsDto } from '../../lib/options/circuit-breaker.options.js';
import { RedisLockOptionsDto } from '../../lib/options/redis-lock.options.js';
import { optionNames } from '../../lib/options/validate-options.js';
import { collectEscapes, settle } from '../support/escapes.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';
import {
  anyValue,
  field,
  fuzzParameters,
  isSeconds,
  notCatalogError,
  notTuple,
  throwingGetter,
  throwingProxy,
  within,
  type Field,
} from './fuzz.js';

/**
 * Options of every type, valid and not, for `new RedisLockService()` and
 * `BufferLockModule.forRoot()`: the options are taken exactly when every one given keeps its
 * rule, and otherwise refused with one `BufferLockConfigError` that names each broken option and
 * nothing else. Taken options work against a real Redis.
 */

const FILE = 'test/fuzz/options.spec.ts';
const escaped = collectEscapes();
let server: RedisServer;
let admin: Redis;
let shared: Redis;

beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
  shared = server.client();
  await shared.ping();
});
afterAll(() => server.stop());

const seconds = (min = 0.001, max = 1000): fc.Arbitrary<unknown> =>
  fc.oneof(
    fc.integer({ min: Math.ceil(min), max: Math.floor(max) }),
    fc.double({ min, max, noNaN: true }).filter(isSeconds),
    fc.integer({ min: Math.ceil(min), max: Math.floor(max) }).map(String),
  );
const notSeconds = anyValue.filter((v) => !isSeconds(v));
const secondsField = (min?: number, max?: number): fc.Arbitrary<Field> =>
  field(seconds(min, max), notSeconds);

const MESSAGE_IDS = Object.keys(ENGLISH_MESSAGES);
const catalogField = field(
  fc.oneof(
    fc.constant(undefined),
    fc.dictionary(fc.constantFrom(...MESSAGE_IDS), fc.string(), { maxKeys: 3 }),
  ),
  fc.oneof(
    fc.constantFrom(null, 'texts', 7, [], ['redis_lock_failed']),
    fc.constant({ not_a_message_id: 'x' }),
    fc.constant({ redis_lock_failed: 1 }),
    fc.constantFrom(...MESSAGE_IDS).map(throwingGetter),
    fc.constant(null).map(throwingProxy),
  ),
);

const namespaceField = field(
  fc.string({ minLength: 1, unit: 'binary' }),
  anyValue.filter((v) => typeof v !== 'string' || v === ''),
);
const booleanField = field(
  fc.boolean(),
  anyValue.filter((v) => typeof v !== 'boolean'),
);
/** Not a client the lock drives, and no factory. */
const notAClient = fc.oneof(
  anyValue.filter((v) => typeof v !== 'function'),
  fc.constant({ eval: 'not a method' }),
  fc.constant({ eval() {}, sendCommand() {}, isOpen: true }),
);

/** The lock's options by name, each with the message id it is refused with. */
const LOCK_CODES: Readonly<Record<string, string>> = {
  redis: 'redis_client_invalid',
  namespace: 'redis_namespace_invalid',
  ttl: 'redis_ttl_invalid',
  messages: 'redis_messages_invalid',
  fencing: 'redis_fencing_invalid',
  connectTimeout: 'redis_connect_timeout_invalid',
  notAnOption: 'option_unknown',
};

/** How the options object itself is made. */
type Container = 'plain' | 'frozen' | 'null-prototype' | 'unknown-key' | 'throwing-getter';
const container = fc.constantFrom<Container>(
  'plain',
  'frozen',
  'null-prototype',
  'unknown-key',
  'throwing-getter',
);

/**
 * The options object for `fields`, made as `how` says. With 'throwing-getter', the first field is
 * a getter that throws: that option cannot be read, so it counts as broken. An option given as
 * `undefined` is not given (only `redis` must be); an unknown name is refused.
 */
function optionsOf(
  fields: Readonly<Record<string, Field>>,
  how: Container,
): { options: object; invalid: Set<string> } {
  const options: Record<string, unknown> = how === 'null-prototype' ? Object.create(null) : {};
  const invalid = new Set<string>();
  const names = Object.keys(fields);
  for (const name of names) {
    const { value, valid } = fields[name]!;
    if (how === 'throwing-getter' && name === names[0]) {
      Object.defineProperty(options, name, {
        enumerable: true,
        get: () => {
          throw new Error(`the ${name} getter throws`);
        },
      });
      invalid.add(name);
      continue;
    }
    options[name] = value;
    if (!valid && (value !== undefined || name === 'redis')) invalid.add(name);
  }
  if (how === 'unknown-key') {
    options.notAnOption = 'refused';
    invalid.add('notAnOption');
  }
  return { options: how === 'frozen' ? Object.freeze(options) : options, invalid };
}

/** The names of the options a config error lists. */
const violated = (error: BufferLockConfigError): Set<string> =>
  new Set(error.violations.map((v) => v.property));

let serial = 0;

/** The connection a generated name stands for (it needs the server, so it is made late). */
const connectionOf = (name: unknown): unknown => {
  switch (name) {
    case 'url':
      return server.url;
    case 'options':
      return { host: '127.0.0.1', port: server.port };
    case 'client':
      return shared;
    case 'factory':
      return () => server.client();
    default:
      return name;
  }
};
const connections = async (): Promise<number> =>
  String(await admin.client('LIST'))
    .trim()
    .split('\n').length;

/** What the module reads as ioredis options: an object of Object's or of no prototype. */
const isPlainObject = (v: unknown): boolean => {
  try {
    return (
      typeof v === 'object' &&
      v !== null &&
      [Object.prototype, null].includes(Object.getPrototypeOf(v))
    );
  } catch {
    return false;
  }
};
/** What the module reads as a URL: redis://, rediss:// or a Unix socket path. */
const isUrlForm = (v: unknown): boolean => typeof v === 'string' && /^(rediss?:\/\/|\/)/.test(v);

describe('options of every type', () => {
  it('new RedisLockService() takes valid options and refuses each broken one by name', async () => {
    const lockFields = fc.record(
      {
        redis: field(
          fc.constantFrom<unknown>(
            () => shared,
            async () => shared,
            () => Promise.resolve(shared),
          ),
          notAClient,
        ),
        namespace: namespaceField,
        ttl: secondsField(0.5, 100_000),
        messages: catalogField,
        fencing: booleanField,
        connectTimeout: secondsField(0.5, 100),
      },
      { requiredKeys: ['redis'] },
    );
    await fc.assert(
      fc.asyncProperty(lockFields, container, fc.string(), async (fields, how, key) => {
        const { options, invalid } = optionsOf(fields, how);
        let lock: RedisLockService;
        try {
          lock = new RedisLockService(options as RedisLockOptions);
        } catch (error) {
          expect(notCatalogError(error)).toBeUndefined();
          expect(error).toBeInstanceOf(BufferLockConfigError);
          const config = error as BufferLockConfigError;
          expect(violated(config)).toEqual(invalid);
          for (const v of config.violations) expect(v.code).toBe(LOCK_CODES[v.property]);
          return;
        }
        expect(invalid).toEqual(new Set());
        // Taken options work: a fresh key is acquired and released on the real server.
        const fresh = `${key}:${++serial}`;
        const acquired = await within(2000, () => lock.acquire(fresh));
        expect(acquired).toMatchObject({ settled: true, ok: true });
        const result = (acquired as { value: unknown }).value;
        expect(notTuple(result)).toBeUndefined();
        const [guard, error] = result as Awaited<ReturnType<RedisLockService['acquire']>>;
        expect(error).toBeUndefined();
        expect(guard).toBeDefined();
        expect(await within(2000, () => lock.release(guard!))).toMatchObject({
          value: [true, undefined],
        });
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 150),
    );
    await settle();
    expect(escaped).toEqual([]);
  });

  it('an options object whose every Proxy trap throws is refused with a config error', () => {
    let thrown: unknown;
    try {
      expect(new RedisLockService(throwingProxy() as RedisLockOptions)).toBeUndefined();
    } catch (error) {
      thrown = error;
    }
    expect(notCatalogError(thrown)).toBeUndefined();
    expect((thrown as BufferLockConfigError).code).toBe('redis_client_invalid');
  });

  it('BufferLockModule.forRoot() boots with valid options, refuses each broken one, and leaves no connection behind', async () => {
    const silent = { log() {}, warn() {}, error() {} };
    const moduleFields = fc.record(
      {
        redis: field(
          fc.constantFrom<unknown>('url', 'options', 'client', 'factory'),
          fc.oneof(
            notAClient.filter((v) => !isPlainObject(v) && !isUrlForm(v)),
            fc.constantFrom('localhost:6379', 'http://127.0.0.1:6379', ''),
          ),
        ),
        namespace: namespaceField,
        ttl: secondsField(20, 1000),
        lockTimeout: secondsField(0.5, 10),
        onBusy: field(
          fc.constantFrom('wait', 'skip', 'throw'),
          anyValue.filter((v) => !['wait', 'skip', 'throw'].includes(v as string)),
        ),
        onRedisError: field(
          fc.constantFrom('proceed', 'throw'),
          anyValue.filter((v) => !['proceed', 'throw'].includes(v as string)),
        ),
        share: booleanField,
        logInterval: secondsField(),
        maxHold: field(
          fc.oneof(fc.constant(undefined), seconds()),
          notSeconds.filter((v) => v !== undefined),
        ),
        locale: field(
          fc.constant('en'),
          anyValue.filter((v) => typeof v !== 'string' || v === ''),
        ),
        logger: field(
          fc.constantFrom<unknown>(undefined, silent),
          fc.oneof(
            fc.constantFrom(null, 5, 'console', { log() {} }),
            fc.constantFrom('log', 'warn', 'error').map(throwingGetter),
            fc.constant(null).map(throwingProxy),
          ),
        ),
        onLockLost: field(
          fc.constantFrom<unknown>(undefined, () => undefined),
          anyValue.filter((v) => v !== undefined && typeof v !== 'function'),
        ),
        circuitBreaker: field(
          fc.oneof(
            fc.constant(false),
            fc.record(
              {
                failureThreshold: fc.integer({ min: 1, max: 10 }),
                openSeconds: seconds(),
                probes: fc.integer({ min: 1, max: 3 }),
              },
              { requiredKeys: [] },
            ),
          ),
          fc.oneof(
            fc.constantFrom(true, 0, 'off', null),
            fc.constant({ failureThreshold: 0 }),
            fc.constant({ openSeconds: -1 }),
            fc.constant({ probes: 1.5 }),
            fc.constantFrom('failureThreshold', 'openSeconds', 'probes').map(throwingGetter),
          ),
        ),
        cachePrefix: field(
          fc.string().filter((s) => !/[{}]/.test(s)),
          fc.oneof(
            fc.constantFrom('{tag}', 'a}b'),
            anyValue.filter((v) => typeof v !== 'string'),
          ),
        ),
        messages: catalogField,
      },
      { requiredKeys: ['redis'] },
    );
    const baseline = await connections();

    await fc.assert(
      fc.asyncProperty(moduleFields, container, async (generated, how) => {
        const fields = {
          ...generated,
          redis: { ...generated.redis, value: connectionOf(generated.redis.value) },
        };
        const { options, invalid } = optionsOf(fields, how);
        // The lock's wait must stay shorter than its life: the one rule between two options.
        const effective = (name: 'ttl' | 'lockTimeout', fallback: number): number | undefined => {
          const f = fields[name];
          if (!f || f.value === undefined) return fallback;
          return f.valid && !invalid.has(name) ? Number(f.value) : undefined;
        };
        const ttl = effective('ttl', 60);
        const lockTimeout = effective('lockTimeout', 10);
        if (ttl !== undefined && lockTimeout !== undefined && lockTimeout >= ttl) {
          invalid.add('lockTimeout');
        }
        const booted = await within(5000, () =>
          Test.createTestingModule({
            imports: [BufferLockModule.forRoot(options as BufferLockOptions)],
          }).compile(),
        );
        expect(booted.settled).toBe(true);
        if (booted.settled && !booted.ok) {
          expect(notCatalogError(booted.error)).toBeUndefined();
          expect(booted.error).toBeInstanceOf(BufferLockConfigError);
          expect(violated(booted.error as BufferLockConfigError)).toEqual(invalid);
          return;
        }
        expect(invalid).toEqual(new Set());
        const app = (
          booted as {
            value: Awaited<ReturnType<ReturnType<typeof Test.createTestingModule>['compile']>>;
          }
        ).value;
        try {
          const lock = app.get(RedisLockService);
          const acquired = await within(3000, () => lock.acquire(`module:${++serial}`));
          expect(acquired).toMatchObject({ settled: true, ok: true });
          const [guard, error] = (acquired as { value: [unknown, unknown] }).value;
          expect(error).toBeUndefined();
          expect(guard).toBeDefined();
        } finally {
          await app.close();
        }
        // The module quits the clients it made; a client passed in stays open (it is `shared`).
        const deadline = Date.now() + 2000;
        while ((await connections()) !== baseline && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 10));
        }
        expect(await connections()).toBe(baseline);
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 40),
    );
    await settle();
    expect(escaped).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------
// Option names, undefined, and thenable factories

const silentLogger = { log() {}, warn() {}, error() {} };

/** Where an options object is read: each level with the names it knows. */
const LEVELS = {
  module: optionNames(BufferLockOptionsDto),
  circuitBreaker: optionNames(CircuitBreakerOptionsDto),
  cacheDefaults: optionNames(CacheOptionsDto),
  lock: optionNames(RedisLockOptionsDto),
  getOrSet: optionNames(CacheOptionsDto),
  cached: optionNames(CacheOptionsDto),
  singleFlight: new Set(['ttl', 'lockTimeout', 'onBusy', 'share', 'onRedisError', 'maxHold']),
} as const;
type Level = keyof typeof LEVELS;

/** A known name of `level` with one slip of the keyboard: a letter dropped, doubled, swapped or added. */
const typoAt = (level: Level): fc.Arbitrary<string> =>
  fc
    .tuple(
      fc.constantFrom(...LEVELS[level]),
      fc.nat(),
      fc.constantFrom('drop', 'double', 'swap', 'add', 'case'),
      fc.string({ minLength: 1, maxLength: 1 }),
    )
    .map(([name, at, slip, letter]) => {
      const i = at % name.length;
      switch (slip) {
        case 'drop':
          return name.slice(0, i) + name.slice(i + 1);
        case 'double':
          return name.slice(0, i) + name[i] + name.slice(i);
        case 'swap':
          return name.slice(0, i) + (name[i + 1] ?? '') + name[i] + name.slice(i + 2);
        case 'case':
          return name.slice(0, i) + name[i]!.toUpperCase() + name.slice(i + 1);
        default:
          return name.slice(0, i) + letter + name.slice(i);
      }
    })
    .filter((name) => name !== '' && name !== '__proto__' && !LEVELS[level].has(name));

/** The config error `run` throws or rejects with, else `undefined`. */
async function refusalOf(run: () => unknown): Promise<unknown> {
  try {
    await run();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** Some of `names`, less `leaveOut`. */
const some = (names: ReadonlySet<string>, leaveOut: string[] = []): fc.Arbitrary<string[]> =>
  fc.subarray([...names].filter((name) => !leaveOut.includes(name)));
/** Each of `names` given as `undefined`. */
const undefinedOf = (names: string[]): Record<string, undefined> =>
  Object.fromEntries(names.map((name) => [name, undefined]));

let fuzzLock: RedisLockService;
let fuzzCache: BufferCache;

describe('option names and undefined at every level', () => {
  beforeAll(() => {
    fuzzLock = new RedisLockService({ redis: shared, namespace: 'fuzz:names:' });
    fuzzCache = new BufferCache({ lock: fuzzLock, options: { logger: silentLogger } });
  });

  it('a typo of a known name, at any level, is refused with option_unknown naming it', async () => {
    const level = fc.constantFrom<Level>(...(Object.keys(LEVELS) as Level[]));
    const typo = level.chain((l) => fc.tuple(fc.constant(l), typoAt(l)));
    await fc.assert(
      fc.asyncProperty(typo, async ([where, name]) => {
        const own = { [name]: 1 };
        const shown = ['circuitBreaker', 'cacheDefaults'].includes(where)
          ? `${where}.${name}`
          : name;
        const run = (): unknown => {
          switch (where) {
            case 'module':
            case 'circuitBreaker':
            case 'cacheDefaults': {
              const options =
                where === 'module' ? { redis: shared, ...own } : { redis: shared, [where]: own };
              return Test.createTestingModule({
                imports: [BufferLockModule.forRoot(options as BufferLockOptions)],
              }).compile();
            }
            case 'lock':
              return new RedisLockService({ redis: shared, ...own });
            case 'getOrSet':
              return fuzzCache.getOrSet(`names:${++serial}`, () => 1, own);
            case 'cached':
              return Cached('k', own);
            case 'singleFlight':
              return SingleFlight('k', own);
          }
        };
        const error = await refusalOf(run);
        expect(notCatalogError(error)).toBeUndefined();
        expect(error).toBeInstanceOf(BufferLockConfigError);
        const unknown = (error as BufferLockConfigError).violations.filter(
          (v) => v.code === 'option_unknown',
        );
        expect(unknown.map((v) => v.message)).toEqual([
          `cache_lock ${shown} is not an option here; check its spelling`,
        ]);
      }),
      fuzzParameters(FILE, 100),
    );
  });

  it('undefined for any set of known names, at any level, is taken as not given', async () => {
    const baseline = await Test.createTestingModule({
      imports: [BufferLockModule.forRoot({ redis: shared, logger: silentLogger })],
    }).compile();
    const defaults = baseline.get<Record<string, unknown>>(BUFFER_LOCK_OPTIONS);
    await baseline.close();
    await fc.assert(
      fc.asyncProperty(
        some(LEVELS.module, ['redis', 'logger']),
        some(LEVELS.circuitBreaker),
        some(LEVELS.cacheDefaults),
        some(LEVELS.getOrSet),
        some(LEVELS.singleFlight),
        async (top, breaker, cacheDefaults, perCall, flight) => {
          const options = {
            redis: shared,
            logger: silentLogger,
            ...undefinedOf(top),
            ...(top.includes('circuitBreaker') ? {} : { circuitBreaker: undefinedOf(breaker) }),
            ...(top.includes('cacheDefaults') ? {} : { cacheDefaults: undefinedOf(cacheDefaults) }),
          };
          const app = await Test.createTestingModule({
            imports: [BufferLockModule.forRoot(options as BufferLockOptions)],
          }).compile();
          try {
            const resolved = app.get<Record<string, unknown>>(BUFFER_LOCK_OPTIONS);
            for (const name of LEVELS.module) {
              if (name !== 'redis') expect(resolved[name]).toEqual(defaults[name]);
            }
            const cache = app.get(BufferCache);
            const k = `undefined:${++serial}`;
            expect(await cache.getOrSet(k, () => 'built', undefinedOf(perCall))).toBe('built');
            expect(await cache.getOrSet(k, () => 'again', undefinedOf(perCall))).toBe('built');
          } finally {
            await app.close();
          }
          expect(() => Cached('k', undefinedOf(perCall))).not.toThrow();
          expect(() => SingleFlight('k', undefinedOf(flight))).not.toThrow();
        },
      ),
      fuzzParameters(FILE, 30),
    );
  });
});

type Resolve = (value: unknown) => void;
/** Thenables that never give a value, of every kind; `then` is added where it is read. */
const NEVER: Record<string, () => unknown> = {
  silent: () => ({ then() {} }),
  function: () => Object.assign(() => {}, { then() {} }),
  self: () => {
    const thenable: { then(resolve: Resolve): void } = { then: (resolve) => resolve(thenable) };
    return thenable;
  },
  endless: function endless(): unknown {
    return { then: (resolve: Resolve) => resolve(endless()) };
  },
  'to a pending Promise': () => ({ then: (resolve: Resolve) => resolve(new Promise(() => {})) }),
  'a Promise of a self thenable after steps': () => ({
    then: (resolve: Resolve) => resolve(NEVER.self!()),
  }),
};

describe('a factory returning a thenable of any kind', () => {
  it('is bounded by connectTimeout when it never gives a client, and used when it does', async () => {
    const chain = (steps: number, end: unknown): unknown =>
      steps === 0 ? end : { then: (resolve: Resolve) => resolve(chain(steps - 1, end)) };
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...Object.keys(NEVER)),
        fc.integer({ min: 0, max: 4 }),
        fc.boolean(),
        fc.constantFrom(0.05, 0.1, 0.2),
        async (kind, steps, gives, connectTimeout) => {
          const made = chain(steps, gives ? shared : NEVER[kind]!());
          const lock = new RedisLockService({
            redis: (() => made) as never,
            namespace: 'fuzz:thenable:',
            connectTimeout,
          });
          const outcome = await within(connectTimeout * 1000 + 2000, () =>
            lock.acquire(`thenable:${++serial}`),
          );
          expect(outcome).toMatchObject({ settled: true, ok: true });
          const [guard, error] = (outcome as { value: [unknown, unknown] }).value as Awaited<
            ReturnType<RedisLockService['acquire']>
          >;
          if (gives) {
            expect(error).toBeUndefined();
            expect(await admin.get(guard!.key)).toBe(guard!.token);
            await lock.release(guard!);
          } else {
            expect(guard).toBeUndefined();
            expect(error?.code).toBe('redis_connect_timeout');
          }
        },
      ),
      fuzzParameters(FILE, 30),
    );
  });
});
