import {
  Inject,
  Injectable,
  Module,
  type DynamicModule,
  type OnApplicationShutdown,
  type OnModuleInit,
} from '@nestjs/common';
import { enableBufferLockTelemetry, type BufferLockTelemetryOptions } from './telemetry.js';

const TELEMETRY_OPTIONS = Symbol('bufferLockTelemetryOptions');

@Injectable()
class TelemetrySubscription implements OnModuleInit, OnApplicationShutdown {
  private stop: (() => void) | undefined;

  constructor(@Inject(TELEMETRY_OPTIONS) private readonly options: BufferLockTelemetryOptions) {}

  onModuleInit(): void {
    this.stop ??= enableBufferLockTelemetry(this.options);
  }

  onApplicationShutdown(): void {
    this.stop?.();
    this.stop = undefined;
  }
}

/**
 * `enableBufferLockTelemetry` for a Nest app, from module start to application shutdown.
 *
 * @example
 * ```ts
 * @Module({ imports: [BufferLockModule.forRoot({ redis }), BufferLockTelemetryModule.forRoot()] })
 * export class AppModule {}
 * ```
 */
@Module({})
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module class carries only metadata
export class BufferLockTelemetryModule {
  static forRoot(options: BufferLockTelemetryOptions = {}): DynamicModule {
    return {
      module: BufferLockTelemetryModule,
      providers: [{ provide: TELEMETRY_OPTIONS, useValue: options }, TelemetrySubscription],
    };
  }
}
