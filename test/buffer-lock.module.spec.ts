/* oxlint-disable typescript/no-extraneous-class -- Nest modules are empty classes with metadata */
import {
  Controller,
  Get,
  Inject,
  Injectable,
  Module,
  Scope,
  type INestApplication,
} from '@nestjs/common';
import { Test } from '@nestjs/testing';
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { refusedWith } from './support/refused.js';
import {
  BufferLockConfigError,
  BufferLockMessages,
  BufferLockModule,
  ENGLISH_MESSAGES,
  InjectBufferLockOptions,
  RedisLockService,
  SingleFlight,
  SingleFlightEngine,
  type BufferLockOptions,
  type MessageId,
  type ResolvedBufferLockOptions,
} from '../lib/index.js';
import { BUFFER_LOCK_OPTIONS } from '../lib/options/buffer-lock.constants.js';
import { startRedis, type RedisServer } from './support/redis-server.js';
import { MemoryLogger } from './support/nest-helpers.js';

let server: RedisServer;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis();
  admin = server.client();
});
afterAll(() => server.stop());

const NS = 'test:module:';
const md5 = (text: string): string => createHash('md5').update(text, 'utf8').digest('hex');
const client = (): Redis => server.client();
/** Whether a connection with this name is open on the test's server. */
const named = (name: string) => async (): Promise<boolean> =>
  String(await admin.client('LIST')).includes(`name=${name}`);

async function compile(imports: unknown[], providers: unknown[] = []) {
  return Test.createTestingModule({
    imports: imports as never[],
    providers: providers as never[],
  }).compile();
}

/** Compiles a module with `options` and returns the config error it must throw. */
async function configErrorOf(options: unknown): Promise<BufferLockConfigError> {
  const error: unknown = await compile([
    BufferLockModule.forRoot(options as BufferLockOptions),
  ]).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(BufferLockConfigError);
  return error as BufferLockConfigError;
}

@Injectable()
class AppConfig {
  // Environment config delivers strings.
  readonly values: Record<string, string> = { TTL: '30', LOCK_TIMEOUT: '5', NS: `${NS}async:` };
}

@Module({ providers: [AppConfig], exports: [AppConfig] })
class AppConfigModule {}

describe('forRoot', () => {
  it('provides RedisLockService and the validated options with every default', async () => {
    const ref = await compile([
      BufferLockModule.forRoot({ redis: () => server.client(), namespace: `${NS}root:` }),
    ]);
    const options = ref.get<ResolvedBufferLockOptions>(BUFFER_LOCK_OPTIONS);
    expect(options).toMatchObject({
      namespace: `${NS}root:`,
      ttl: 60,
      lockTimeout: 10,
      onBusy: 'wait',
      locale: 'en',
      logInterval: 10,
      share: false,
      onRedisError: 'proceed',
      circuitBreaker: { failureThreshold: 5, openSeconds: 10, probes: 1 },
    });
    expect(options.maxHold).toBeUndefined();
    expect(options.lockTimeout).toBeLessThan(options.ttl);
    const lock = ref.get(RedisLockService);
    const [guard] = await lock.acquire('forRoot');
    expect(guard?.key.startsWith(`${NS}root:`)).toBe(true);
    await lock.release(guard!);
    await ref.close();
  });

  it('keeps isGlobal and overrides out of the options, and isGlobal makes the module global', async () => {
    @Injectable()
    class Consumer {
      constructor(readonly lock: RedisLockService) {}
    }
    @Module({ providers: [Consumer] })
    class FeatureModule {}

    const ref = await compile([
      BufferLockModule.forRoot({ redis: () => server.client(), isGlobal: true, overrides: [] }),
      FeatureModule,
    ]);
    const options = ref.get(BUFFER_LOCK_OPTIONS) as unknown as Record<string, unknown>;
    expect(Object.keys(options)).not.toContain('isGlobal');
    expect(Object.keys(options)).not.toContain('overrides');
    expect(ref.get(Consumer).lock).toBe(ref.get(RedisLockService));
    await ref.close();
  });

  it('is not global by default: a module that does not import it cannot inject the service', async () => {
    @Injectable()
    class Consumer {
      constructor(readonly lock: RedisLockService) {}
    }
    @Module({ providers: [Consumer] })
    class FeatureModule {}
    await expect(
      compile([BufferLockModule.forRoot({ redis: () => server.client() }), FeatureModule]),
    ).rejects.toThrow(/RedisLockService/);
  });
});

describe('forRootAsync', () => {
  it('useFactory with inject and imports; numeric strings are read as seconds', async () => {
    const ref = await compile([
      BufferLockModule.forRootAsync({
        imports: [AppConfigModule],
        inject: [AppConfig],
        useFactory: (config: AppConfig) => ({
          redis: () => server.client(),
          namespace: config.values.NS,
          ttl: config.values.TTL as unknown as number,
          lockTimeout: config.values.LOCK_TIMEOUT as unknown as number,
        }),
      }),
    ]);
    expect(ref.get(BUFFER_LOCK_OPTIONS)).toMatchObject({
      namespace: `${NS}async:`,
      ttl: 30,
      lockTimeout: 5,
    });
    await ref.close();
  });

  it('useClass', async () => {
    @Injectable()
    class OptionsFactory {
      create(): BufferLockOptions {
        return { redis: () => server.client(), namespace: `${NS}class:`, ttl: 20 };
      }
    }
    const ref = await compile([BufferLockModule.forRootAsync({ useClass: OptionsFactory })]);
    expect(ref.get(BUFFER_LOCK_OPTIONS)).toMatchObject({ namespace: `${NS}class:`, ttl: 20 });
    await ref.close();
  });

  it('useExisting', async () => {
    @Injectable()
    class OptionsFactory {
      create(): BufferLockOptions {
        return { redis: () => server.client(), namespace: `${NS}existing:`, onBusy: 'skip' };
      }
    }
    @Module({ providers: [OptionsFactory], exports: [OptionsFactory] })
    class OptionsModule {}
    const ref = await compile([
      BufferLockModule.forRootAsync({ imports: [OptionsModule], useExisting: OptionsFactory }),
    ]);
    expect(ref.get(BUFFER_LOCK_OPTIONS)).toMatchObject({
      namespace: `${NS}existing:`,
      onBusy: 'skip',
    });
    await ref.close();
  });

  it('validates a factory result like forRoot does', async () => {
    const error: unknown = await compile([
      BufferLockModule.forRootAsync({
        useFactory: () => ({ redis: () => server.client(), ttl: 'soon' as never }),
      }),
    ]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).message).toEqual(
      refusedWith(ENGLISH_MESSAGES.redis_ttl_invalid),
    );
  });
});

describe('validation at bootstrap', () => {
  it.each([
    ['logger', 'logger_invalid'],
    ['circuitBreaker', 'circuit_breaker_invalid'],
    ['locale', 'locale_invalid'],
    ['messages', 'redis_messages_invalid'],
  ])(
    'an option %s that cannot be read (its getter throws) is refused as %s',
    async (name, code) => {
      const options = Object.defineProperty({ redis: client }, name, {
        enumerable: true,
        get: () => {
          throw new Error(`${name} cannot be read`);
        },
      });
      const error = await configErrorOf(options);
      expect(error.violations.map((v) => [v.property, v.code])).toEqual([[name, code]]);
    },
  );

  it('a nested option whose getter throws, or a logger that is a throwing Proxy, is refused', async () => {
    const breaker = Object.defineProperty({}, 'probes', {
      enumerable: true,
      get: () => {
        throw new Error('probes cannot be read');
      },
    });
    const logger = new Proxy(
      {},
      {
        get: () => {
          throw new Error('get');
        },
      },
    );
    const error = await configErrorOf({ redis: client, circuitBreaker: breaker, logger });
    expect(error.violations.map((v) => v.property)).toEqual(['logger', 'circuitBreaker']);
  });

  const cases: [string, Record<string, unknown>, MessageId][] = [
    ['redis missing', {}, 'module_redis_invalid'],
    ['redis a number', { redis: 6379 }, 'module_redis_invalid'],
    ['redis a string that is no URL', { redis: 'localhost' }, 'module_redis_invalid'],
    ['redis an object of a class without eval()', { redis: new Date() }, 'module_redis_invalid'],
    ['namespace empty', { namespace: '' }, 'redis_namespace_invalid'],
    ['ttl zero', { ttl: 0 }, 'redis_ttl_invalid'],
    ['ttl negative', { ttl: -1 }, 'redis_ttl_invalid'],
    ['ttl not a number', { ttl: 'abc' }, 'redis_ttl_invalid'],
    ['ttl in exponent form', { ttl: '1e3' }, 'redis_ttl_invalid'],
    ['ttl NaN', { ttl: Number.NaN }, 'redis_ttl_invalid'],
    ['lockTimeout zero', { lockTimeout: 0 }, 'lock_timeout_invalid'],
    ['lockTimeout not a number', { lockTimeout: 'ten' }, 'lock_timeout_invalid'],
    ['lockTimeout equal to ttl', { ttl: 5, lockTimeout: 5 }, 'lock_timeout_not_below_ttl'],
    ['the default lockTimeout above a short ttl', { ttl: 5 }, 'lock_timeout_not_below_ttl'],
    ['onBusy unknown', { onBusy: 'later' }, 'on_busy_invalid'],
    ['locale empty', { locale: '' }, 'locale_invalid'],
    ['catalogs with an unknown id', { catalogs: { de: { nope: 'x' } } }, 'catalogs_invalid'],
    ['catalogs not an object', { catalogs: 'de' }, 'catalogs_invalid'],
    ['logger without methods', { logger: {} }, 'logger_invalid'],
    ['logInterval negative', { logInterval: -1 }, 'log_interval_invalid'],
    ['storeTimeout zero', { storeTimeout: 0 }, 'store_timeout_invalid'],
    ['messages with an unknown id', { messages: { nope: 'x' } }, 'redis_messages_invalid'],
    ['share not a boolean', { share: 'yes' }, 'share_invalid'],
    [
      'serializer without deserialize()',
      { serializer: { serialize: String } },
      'serializer_invalid',
    ],
    ['onRedisError unknown', { onRedisError: 'retry' }, 'on_redis_error_invalid'],
    ['maxHold zero', { maxHold: 0 }, 'max_hold_invalid'],
    ['onLockLost not a function', { onLockLost: 'log' }, 'on_lock_lost_invalid'],
    ['circuitBreaker true', { circuitBreaker: true }, 'circuit_breaker_invalid'],
    [
      'circuitBreaker.failureThreshold a fraction',
      { circuitBreaker: { failureThreshold: 2.5 } },
      'breaker_failures_invalid',
    ],
    [
      'circuitBreaker.openSeconds negative',
      { circuitBreaker: { openSeconds: -1 } },
      'breaker_open_seconds_invalid',
    ],
    ['circuitBreaker.probes zero', { circuitBreaker: { probes: 0 } }, 'breaker_probes_invalid'],
    ["traceKeys 'yes'", { traceKeys: 'yes' }, 'trace_keys_invalid'],
  ];
  for (const [name, options, code] of cases) {
    it(`rejects ${name} with ${code}`, async () => {
      const input =
        'redis' in options || name === 'redis missing' ? options : { redis: client, ...options };
      const error = await configErrorOf(input);
      expect(error.violations.map((v) => v.code)).toEqual([code]);
      expect(error.message).toEqual(refusedWith(ENGLISH_MESSAGES[code]));
    });
  }

  it('lists every violation in one error', async () => {
    const error = await configErrorOf({
      redis: 42,
      namespace: '',
      ttl: -1,
      lockTimeout: 'x',
      onBusy: 'never',
      logger: 'console',
    });
    expect(error.violations.map((v) => v.code).toSorted()).toEqual(
      [
        'module_redis_invalid',
        'redis_namespace_invalid',
        'redis_ttl_invalid',
        'lock_timeout_invalid',
        'on_busy_invalid',
        'logger_invalid',
      ].toSorted(),
    );
    for (const violation of error.violations) {
      expect(error.message).toContain(ENGLISH_MESSAGES[violation.code]);
    }
  });

  it('accepts the URL and ioredis-options forms of redis', async () => {
    for (const redis of [server.url, { host: '127.0.0.1', port: server.port }]) {
      const ref = await compile([BufferLockModule.forRoot({ redis })]);
      expect(typeof ref.get<ResolvedBufferLockOptions>(BUFFER_LOCK_OPTIONS).redis).toBe('function');
      await ref.close();
    }
  });

  it('reports violations in the chosen locale', async () => {
    const error = await configErrorOf({
      redis: client,
      ttl: 0,
      locale: 'de',
      catalogs: { de: { redis_ttl_invalid: 'cache_lock ttl muss eine positive Zahl sein' } },
    });
    expect(error.message).toEqual(refusedWith('cache_lock ttl muss eine positive Zahl sein'));
  });
});

describe('the client: made once per process, at startup, quit at shutdown only if the module made it', () => {
  it('calls the factory once across 1 000 HTTP requests to a request-scoped controller', async () => {
    let calls = 0;
    @Controller({ path: 'scoped', scope: Scope.REQUEST })
    class ScopedController {
      constructor(private readonly lock: RedisLockService) {}
      @Get()
      async hit(): Promise<string> {
        const [guard, error] = await this.lock.acquire(`req:${Math.random()}`);
        if (error) throw error;
        await this.lock.release(guard!);
        return 'ok';
      }
    }
    const ref2 = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRoot({
          redis: () => {
            calls++;
            return server.client();
          },
          namespace: `${NS}thousand:`,
        }),
      ],
      controllers: [ScopedController],
    }).compile();
    const app2 = ref2.createNestApplication({ logger: false });
    await app2.init();
    expect(calls).toBe(1); // made once, as the app boots: a Redis that cannot be reached is said then
    const http = app2.getHttpServer();
    for (let batch = 0; batch < 20; batch++) {
      const replies = await Promise.all(
        Array.from({ length: 50 }, () => request(http).get('/scoped')),
      );
      expect(replies.every((reply) => reply.status === 200)).toBe(true);
    }
    expect(calls).toBe(1);
    await app2.close();
  });

  it('quits a factory-made client at shutdown', async () => {
    const ref = await compile([
      BufferLockModule.forRoot({ redis: () => server.client({ connectionName: 'bl-factory' }) }),
    ]);
    const lock = ref.get(RedisLockService);
    const [guard] = await lock.acquire('shutdown-factory');
    await lock.release(guard!);
    expect(await named('bl-factory')()).toBe(true);
    await ref.close();
    expect(await named('bl-factory')()).toBe(false);
  });

  it('makes and quits the client for a URL and for ioredis options', async () => {
    const ref = await compile([
      BufferLockModule.forRoot({
        redis: { host: '127.0.0.1', port: server.port, connectionName: 'bl-options' },
      }),
    ]);
    const lock = ref.get(RedisLockService);
    const [guard] = await lock.acquire('shutdown-options');
    expect(guard).toBeDefined();
    await lock.release(guard!);
    expect(await named('bl-options')()).toBe(true);
    await ref.close();
    expect(await named('bl-options')()).toBe(false);

    const ref2 = await compile([
      BufferLockModule.forRoot({ redis: `${server.url}/0?connectionName=bl-url` }),
    ]);
    const [guard2] = await ref2.get(RedisLockService).acquire('shutdown-url');
    expect(guard2).toBeDefined();
    await ref2.get(RedisLockService).release(guard2!);
    await ref2.close();
    expect(await named('bl-url')()).toBe(false);
  });

  it('reports an unreachable URL as redis_lock_failed, not a crash or a hang', async () => {
    const other = await startRedis();
    const url = other.url;
    await other.stop(); // nothing listens on that port now
    const ref = await compile([BufferLockModule.forRoot({ redis: url })]);
    const lock = ref.get(RedisLockService);
    const [guard, error] = await lock.acquire('unreachable');
    expect(guard).toBeUndefined();
    expect(error?.code).toBe('redis_lock_failed');
    expect(error?.message).toMatch(/^Redis lock failed: /);
    await ref.close();
  });

  it('leaves alone a client object the user passed in', async () => {
    const mine = server.client({ connectionName: 'bl-users-own' });
    const ref = await compile([BufferLockModule.forRoot({ redis: mine })]);
    const [guard] = await ref.get(RedisLockService).acquire('shutdown-own');
    await ref.get(RedisLockService).release(guard!);
    await ref.close();
    expect(mine.status).toBe('ready');
    expect(await mine.ping()).toBe('PONG');
  });
});

describe('request-scoped safety', () => {
  it('does not make a default-scope consumer request-scoped', async () => {
    @Injectable()
    class NightlyJob {
      constructor(readonly lock: RedisLockService) {}
    }
    const ref = await compile(
      [BufferLockModule.forRoot({ redis: () => server.client() })],
      [NightlyJob],
    );
    // app.get throws for a request-scoped provider; a default-scope one is a singleton.
    expect(ref.get(NightlyJob)).toBe(ref.get(NightlyJob));
    expect(ref.get(RedisLockService)).toBe(ref.get(NightlyJob).lock);
    await ref.close();
  });

  it('gives two Nest apps in one process their own options, service and engine', async () => {
    @Controller('which')
    class WhichController {
      constructor(
        @InjectBufferLockOptions() private readonly options: ResolvedBufferLockOptions,
        @Inject(RedisLockService) private readonly lock: RedisLockService,
      ) {}
      @Get()
      @SingleFlight('which')
      async which(): Promise<string[]> {
        // While the lock is held, its key is in Redis under this app's namespace.
        const held = await admin.exists(this.lock.redisKey('which'));
        return [this.options.namespace, this.lock.namespace, String(held)];
      }
    }
    const apps: INestApplication[] = [];
    for (const namespace of [`${NS}app-a:`, `${NS}app-b:`]) {
      const ref = await Test.createTestingModule({
        imports: [BufferLockModule.forRoot({ redis: () => server.client(), namespace })],
        controllers: [WhichController],
      }).compile();
      const app = ref.createNestApplication({ logger: false });
      await app.init();
      apps.push(app);
    }
    const [a, b] = await Promise.all(apps.map((app) => request(app.getHttpServer()).get('/which')));
    expect(a!.body).toEqual([`${NS}app-a:`, `${NS}app-a:`, '1']);
    expect(b!.body).toEqual([`${NS}app-b:`, `${NS}app-b:`, '1']);
    for (const app of apps) await app.close();
  });
});

describe('the wake-up subscription refused by Redis', () => {
  it('the module’s engine logs it once in the catalog’s words, and its waiter polls', async () => {
    await admin.call(
      'ACL',
      'SETUSER',
      'nosub-app',
      'on',
      '>pw',
      '~*',
      '&*',
      '+@all',
      '-ssubscribe',
    );
    const logger = new MemoryLogger();
    const ref = await compile([
      BufferLockModule.forRoot({
        redis: () => server.client({ username: 'nosub-app', password: 'pw' }),
        namespace: `${NS}refused:`,
        ttl: 30,
        lockTimeout: 10,
        logger,
      }),
    ]);
    const engine = ref.get(SingleFlightEngine);
    const holder = new RedisLockService({ redis: client(), namespace: `${NS}refused:`, ttl: 30 });
    const [guard] = await holder.acquire('k');
    const started = Date.now();
    const running = engine.run('k', () => 'built');
    await new Promise((r) => setTimeout(r, 200));
    await holder.release(guard!);
    expect(await running).toBe('built');
    expect(Date.now() - started).toBeLessThan(3000);
    expect(logger.at('warn')).toEqual([
      ENGLISH_MESSAGES.subscriber_failed.replace(
        'ERROR',
        "NOPERM this user has no permissions to run the 'ssubscribe' command",
      ),
    ]);
    await ref.close();
  });
});

describe('overrides: a RedisLockService subclass with a Redis Cluster hash tag', () => {
  it('is used by the module, its engine and @SingleFlight', async () => {
    @Injectable()
    class ClusterLock extends RedisLockService {
      protected override key(cacheKey: string): string {
        return `{${this.namespace}}${super.key(cacheKey)}`;
      }
    }
    @Injectable()
    class Tagged {
      constructor(readonly lock: RedisLockService) {}
      @SingleFlight('tagged')
      async keysNow(): Promise<string[]> {
        return admin.keys(`{${NS}tag:}*`);
      }
    }
    const ref = await compile(
      [
        BufferLockModule.forRoot({
          redis: () => server.client(),
          namespace: `${NS}tag:`,
          overrides: [{ provide: RedisLockService, useClass: ClusterLock }],
        }),
      ],
      [Tagged],
    );
    expect(ref.get(RedisLockService)).toBeInstanceOf(ClusterLock);
    expect(ref.get(Tagged).lock).toBeInstanceOf(ClusterLock);
    expect(await ref.get(Tagged).keysNow()).toEqual([`{${NS}tag:}${NS}tag:` + md5('tagged')]);
    await ref.close();
  });
});

describe('messages: a translator plugged in through overrides', () => {
  it('renders config errors with the translator', async () => {
    @Injectable()
    class FakeI18nService {
      translate(key: string): string {
        return `[fr] ${key}`;
      }
    }
    @Module({ providers: [FakeI18nService], exports: [FakeI18nService] })
    class FakeI18nModule {}
    @Injectable()
    class I18nMessages extends BufferLockMessages {
      constructor(private readonly i18n: FakeI18nService) {
        super();
      }
      override template(id: MessageId): string {
        return this.i18n.translate(`buffer-lock.${id}`);
      }
    }
    const error: unknown = await compile([
      BufferLockModule.forRootAsync({
        imports: [FakeI18nModule],
        useFactory: () => ({ redis: () => server.client(), ttl: 0 }),
        overrides: [{ provide: BufferLockMessages, useClass: I18nMessages }],
      }),
    ]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BufferLockConfigError);
    expect((error as BufferLockConfigError).message).toEqual(
      refusedWith('[fr] buffer-lock.redis_ttl_invalid'),
    );
  });

  it('renders lock errors, log lines and 409 bodies with the translator', async () => {
    @Injectable()
    class FakeI18nService {
      translate(key: string, args: Record<string, string | number> = {}): string {
        return `[fr] ${key} ${Object.values(args).join(' ')}`.trim();
      }
    }
    @Module({ providers: [FakeI18nService], exports: [FakeI18nService] })
    class FakeI18nModule {}
    @Injectable()
    class I18nMessages extends BufferLockMessages {
      constructor(private readonly i18n: FakeI18nService) {
        super();
      }
      override render(id: MessageId, params: Record<string, string | number> = {}): string {
        return this.i18n.translate(`buffer-lock.${id}`, params);
      }
    }
    @Controller('busy')
    class BusyController {
      @Get()
      @SingleFlight('busy', { onBusy: 'throw' })
      busy(): string {
        return 'free';
      }
    }
    const logger = new MemoryLogger();
    const ref = await Test.createTestingModule({
      imports: [
        BufferLockModule.forRootAsync({
          imports: [FakeI18nModule],
          useFactory: () => ({ redis: () => server.client(), namespace: `${NS}i18n:`, logger }),
          overrides: [{ provide: BufferLockMessages, useClass: I18nMessages }],
        }),
      ],
      controllers: [BusyController],
    }).compile();
    const app = ref.createNestApplication({ logger: false });
    await app.init();
    const lock = app.get(RedisLockService);

    expect((await lock.acquire(undefined as never))[1]?.message).toBe(
      '[fr] buffer-lock.lock_key_undefined',
    );
    const [guard] = await lock.acquire('busy');
    const reply = await request(app.getHttpServer()).get('/busy');
    expect(reply.status).toBe(409);
    expect(reply.body.message).toBe('[fr] buffer-lock.lock_busy');
    await lock.release(guard!);
    expect((await request(app.getHttpServer()).get('/busy')).text).toBe('free');
    await app.close();
  });
});
