import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import type { BufferLockOptions } from './options/buffer-lock.options.js';

/**
 * Settings of the module itself, given next to the options but never part of them.
 *
 * @example
 * ```ts
 * BufferLockModule.forRoot({ redis: () => new Redis(), isGlobal: true });
 * ```
 */
export interface BufferLockModuleExtras {
  /** Register the module globally, so every module can use `@SingleFlight`. Default false. */
  isGlobal?: boolean;
  /**
   * Providers that replace the module's own, e.g. `{ provide: BufferLockMessages, useClass:
   * MyI18nMessages }` or a `RedisLockService` subclass.
   */
  overrides?: Provider[];
}

/**
 * The generated base of `BufferLockModule` (`forRoot`, `forRootAsync`), its raw options token,
 * and the types of its two option objects.
 *
 * @example
 * ```ts
 * const options: typeof BUFFER_LOCK_OPTIONS_TYPE = { redis: () => new Redis(), isGlobal: true };
 * ```
 */
export const {
  ConfigurableModuleClass: BufferLockConfigurableModule,
  MODULE_OPTIONS_TOKEN: BUFFER_LOCK_MODULE_OPTIONS,
  OPTIONS_TYPE: BUFFER_LOCK_OPTIONS_TYPE,
  ASYNC_OPTIONS_TYPE: BUFFER_LOCK_ASYNC_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<BufferLockOptions>({ moduleName: 'BufferLock' })
  .setClassMethodName('forRoot')
  .setExtras<BufferLockModuleExtras>({ isGlobal: false, overrides: [] }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
    // After the module's own providers, so that an override wins.
    providers: [...(definition.providers ?? []), ...(extras.overrides ?? [])],
  }))
  .build();
