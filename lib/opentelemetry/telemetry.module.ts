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

/** Subscribes when the module starts and unsubscribes at application shutdown. */
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
 * {@link enableBufferLockTelemetry} for a Nest app: spans and metrics from the library's
 * diagnostics channels while the app runs, none after it shut down (`enableShutdownHooks()`, or
 * `app.close()`).
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
  /** The global OpenTelemetry providers, or those given. */
  static forRoot(options: BufferLockTelemetryOptions = {}): DynamicModule {
    return {
      module: BufferLockTelemetryModule,
      providers: [{ provide: TELEMETRY_OPTIONS, useValue: options }, TelemetrySubscription],
    };
  }
}
