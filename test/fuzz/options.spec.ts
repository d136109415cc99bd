import { Test } from '@nestjs/testing';
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  BufferLockModule,
  ENGLISH_MESSAGES,
  RedisLockService,
  type BufferLockOptions,
  type RedisLockOptions,
} from '../../lib/index.js';
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
 * a getter that throws: that option cannot be read, so it counts as broken.
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
    if (!valid) invalid.add(name);
  }
  if (how === 'unknown-key') options.notAnOption = 'ignored';
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
          fc.string({ minLength: 1 }).filter((s) => !/[{}]/.test(s)),
          fc.oneof(
            fc.constantFrom('', '{tag}', 'a}b'),
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
          if (!f) return fallback;
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
