import {
  Inject,
  Module,
  type BeforeApplicationShutdown,
  type ConfigurableModuleCls,
  type DynamicModule,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
  type Provider,
} from '@nestjs/common';
import { BufferLockClients } from './buffer-lock.clients.js';
import { BufferCache } from './cache/buffer-cache.service.js';
import { BUFFER_LOCK_OPTIONS } from './options/buffer-lock.constants.js';
import {
  BUFFER_LOCK_MODULE_OPTIONS,
  BufferLockConfigurableModule,
} from './buffer-lock.module-definition.js';
import { announceMemoryBackend, isMemoryUrl } from './memory/memory-url.js';
import { BufferLockMessages } from './messages/buffer-lock-messages.js';
import { errorText } from './messages/error-text.js';
import {
  messageSettingsOf,
  resolveBufferLockOptions,
  type BufferLockOptions,
  type ResolvedBufferLockOptions,
} from './options/buffer-lock.options.js';
import { RedisLockService } from './lock/redis-lock.service.js';
import { closeReplicaWriters } from './redis/replica-wait.js';
import { within } from './options/seconds.js';
import { withValues } from './options/config-violation.js';
import { shownValue } from './options/shown-value.js';
import { markResolved, readableCopy } from './options/validate-options.js';
import { ping } from './redis/plain-commands.js';
import { SingleFlightEngine } from './single-flight/single-flight.engine.js';

const providers: Provider[] = [
  BufferLockClients,
  {
    provide: BufferLockMessages,
    useFactory: (raw: BufferLockOptions) => new BufferLockMessages(messageSettingsOf(raw)),
    inject: [BUFFER_LOCK_MODULE_OPTIONS],
  },
  {
    // The one place options are validated: at bootstrap, for forRoot and every forRootAsync style.
    provide: BUFFER_LOCK_OPTIONS,
    useFactory: (
      raw: BufferLockOptions,
      messages: BufferLockMessages,
      clients: BufferLockClients,
    ): ResolvedBufferLockOptions => {
      const options = resolveBufferLockOptions(raw, messages);
      if (isMemoryUrl(options.redis)) announceMemoryBackend(options.logger, messages);
      return markResolved(Object.freeze({ ...options, redis: clients.factoryFor(options.redis) }));
    },
    inject: [BUFFER_LOCK_MODULE_OPTIONS, BufferLockMessages, BufferLockClients],
  },
  RedisLockService,
  {
    provide: SingleFlightEngine,
    useFactory: (
      lock: RedisLockService,
      options: ResolvedBufferLockOptions,
      messages: BufferLockMessages,
    ) => new SingleFlightEngine({ lock, options, messages }),
    inject: [RedisLockService, BUFFER_LOCK_OPTIONS, BufferLockMessages],
  },
  {
    provide: BufferCache,
    useFactory: (
      lock: RedisLockService,
      engine: SingleFlightEngine,
      options: ResolvedBufferLockOptions,
      messages: BufferLockMessages,
    ) => new BufferCache({ lock, engine, options, messages }),
    inject: [RedisLockService, SingleFlightEngine, BUFFER_LOCK_OPTIONS, BufferLockMessages],
  },
];

// With the module's own settings, given next to its options, spelled here for the published types.
const ConfigurableModule: ConfigurableModuleCls<
  BufferLockOptions,
  'forRoot',
  'create',
  {
    /** Register the module globally, so every module can use `@SingleFlight`. Default false. */
    isGlobal?: boolean;
    /**
     * Providers that replace the module's own, e.g. `{ provide: BufferLockMessages, useClass:
     * MyI18nMessages }` or a `RedisLockService` subclass.
     */
    overrides?: Provider[];
  }
> = BufferLockConfigurableModule;

/**
 * Redis locks, `@SingleFlight` and the cache for a Nest app. Options are validated at bootstrap
 * (one `BufferLockConfigError` lists every violation). At shutdown it takes no new builds, lets
 * those in flight finish for `shutdownTimeout` seconds at most, releases every lock the process
 * holds, then quits the Redis clients it made itself (a client object you passed in is left alone).
 *
 * @example
 * ```ts
 * @Module({
 *   imports: [
 *     BufferLockModule.forRootAsync({
 *       isGlobal: true,
 *       inject: [ConfigService],
 *       useFactory: (config: ConfigService) => ({
 *         redis: config.get('REDIS_URL', 'redis://127.0.0.1:6379'),
 *         ttl: config.get('LOCK_TTL', 60),
 *       }),
 *     }),
 *   ],
 * })
 * export class AppModule {}
 * ```
 */
@Module({
  providers,
  exports: [
    BUFFER_LOCK_OPTIONS,
    BufferLockMessages,
    RedisLockService,
    SingleFlightEngine,
    BufferCache,
  ],
})
export class BufferLockModule
  extends ConfigurableModule
  implements OnApplicationBootstrap, BeforeApplicationShutdown, OnApplicationShutdown
{
  /** @internal */
  constructor(
    private readonly clients: BufferLockClients,
    private readonly engine: SingleFlightEngine,
    private readonly lock: RedisLockService,
    private readonly messages: BufferLockMessages,
    @Inject(BUFFER_LOCK_OPTIONS) private readonly options: ResolvedBufferLockOptions,
  ) {
    super();
  }

  // Redis is first asked at startup, for at most connectTimeout: one that cannot be reached is
  // said once, with why, and the app boots all the same.
  async onApplicationBootstrap(): Promise<void> {
    const { connectTimeout, logger } = this.options;
    const late = (): never => {
      throw new Error(this.messages.render('redis_timed_out'));
    };
    try {
      await within(this.lock.getClient().then(ping), connectTimeout, late);
    } catch (error) {
      const text = this.messages.render('redis_unreachable_at_boot', { ERROR: errorText(error) });
      const mode = { name: 'onRedisError', value: shownValue(this.options.onRedisError) };
      logger.warn(withValues(this.messages, text, [{ ...mode, isDefault: false }]));
    }
  }

  // Read once, here: an option whose getter throws is reported by validation, not thrown here.
  static override forRoot(
    options: Parameters<typeof ConfigurableModule.forRoot>[0],
  ): DynamicModule {
    return super.forRoot(readableCopy(options) as unknown as typeof options);
  }

  // While the app's other providers still serve: builds in flight finish (shutdownTimeout at
  // most) and every lock this process holds is released, before any connection closes.
  async beforeApplicationShutdown(): Promise<void> {
    await this.engine.close();
  }

  async onApplicationShutdown(): Promise<void> {
    // Once more, for a shutdown that skipped the hook above; the same close, not a second one.
    await this.engine.close();
    closeReplicaWriters();
    await this.clients.closeAll();
  }
}
