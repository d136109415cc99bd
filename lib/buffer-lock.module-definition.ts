import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import type { BufferLockOptions } from './options/buffer-lock.options.js';

/** Settings of the module itself, given next to the options. */
export interface BufferLockModuleExtras {
  /** Register the module globally, so every module can use `@SingleFlight`. Default false. */
  isGlobal?: boolean;
  /**
   * Providers that replace the module's own, e.g. `{ provide: BufferLockMessages, useClass:
   * MyI18nMessages }` or a `RedisLockService` subclass.
   */
  overrides?: Provider[];
}

export const {
  ConfigurableModuleClass: BufferLockConfigurableModule,
  MODULE_OPTIONS_TOKEN: BUFFER_LOCK_MODULE_OPTIONS,
  OPTIONS_TYPE: BUFFER_LOCK_OPTIONS_TYPE,
} = new ConfigurableModuleBuilder<BufferLockOptions>({ moduleName: 'BufferLock' })
  .setClassMethodName('forRoot')
  .setExtras<BufferLockModuleExtras>({ isGlobal: false, overrides: [] }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
    // After the module's own providers, so that an override wins.
    providers: [...(definition.providers ?? []), ...(extras.overrides ?? [])],
  }))
  .build();
