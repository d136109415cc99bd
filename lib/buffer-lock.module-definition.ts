import { ConfigurableModuleBuilder, type Provider } from '@nestjs/common';
import type { BufferLockOptions } from './options/buffer-lock.options.js';

export const {
  ConfigurableModuleClass: BufferLockConfigurableModule,
  MODULE_OPTIONS_TOKEN: BUFFER_LOCK_MODULE_OPTIONS,
} = new ConfigurableModuleBuilder<BufferLockOptions>({ moduleName: 'BufferLock' })
  .setClassMethodName('forRoot')
  // The extras' types and docs are the module's (`BufferLockModule`).
  .setExtras({ isGlobal: false, overrides: [] as Provider[] }, (definition, extras) => ({
    ...definition,
    global: extras.isGlobal,
    // After the module's own providers, so that an override wins.
    providers: [...(definition.providers ?? []), ...(extras.overrides ?? [])],
  }))
  .build();
