import {
  HttpException,
  Inject,
  Injectable,
  Logger,
  Optional,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { HttpAdapterHost, Reflector } from '@nestjs/core';
import { lastValueFrom, of, type Observable } from 'rxjs';
import { LockBusyError } from '../errors/lock-busy.error.js';
import { LockError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { IdempotentOptionsDto } from '../options/idempotent.options.js';
import type { SecondsResolved } from '../options/seconds.js';
import type {
  SingleFlightOptions,
  SingleFlightSettings,
} from '../options/single-flight.options.js';
import { currentFlight } from '../single-flight/flight-context.js';
import { SingleFlightEngine } from '../single-flight/single-flight.engine.js';
import { BufferCache, RECORD_GET, RECORD_SET } from './buffer-cache.service.js';
import type { RequestHeaders } from './http-request.js';
import { headerReader, type HeaderReader } from './http-response.js';
import {
  defaultScope,
  fingerprintOf,
  recordKeyOf,
  recordOf,
  type IdempotencyRecord,
} from './idempotency-record.js';

/** `@Idempotent()`'s metadata key: the route's settings. */
export const IDEMPOTENT_METADATA = 'nestjs-buffer-lock:idempotent';

/** A route's `@Idempotent` settings: its own, and the lock's it gave (`ttl`, `lockTimeout`). */
export interface IdempotentRoute {
  readonly options: Readonly<IdempotentOptionsDto>;
  readonly lock: SecondsResolved<Pick<SingleFlightOptions, 'ttl' | 'lockTimeout'>>;
}

// Methods that change nothing (RFC 9110 §9.2.1): run as they are.
const SAFE_METHODS: ReadonlySet<unknown> = new Set(['GET', 'HEAD', 'OPTIONS', 'TRACE']);

// The draft leaves the key's length open; Stripe takes 255 characters at most.
const MAX_KEY_LENGTH = 255;

// What a request is refused with, by its message id.
const REFUSALS = {
  idempotency_key_missing: 400,
  idempotency_key_invalid: 400,
  idempotency_in_progress: 409,
  idempotency_key_reused: 422,
  idempotency_unavailable: 503,
} as const;

type Request = { readonly headers?: RequestHeaders; readonly body?: unknown };

// The handler's own error, rethrown as it was to the request that ran it.
class HandlerFailed {
  constructor(readonly error: unknown) {}
}

/**
 * Runs an unsafe request once per `Idempotency-Key` across the fleet: the first runs under a
 * Redis lock, a retry is answered with its response; applied by `@Idempotent`.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  @Optional()
  @Inject(HttpAdapterHost)
  private readonly httpAdapterHost?: HttpAdapterHost;

  @Optional()
  @Inject(BufferLockMessages)
  private readonly messages: BufferLockMessages = new BufferLockMessages();

  private read?: HeaderReader;

  // Each route's lock settings over the module's, merged once.
  private readonly settings = new WeakMap<IdempotentRoute, SingleFlightSettings>();

  constructor(
    @Inject(BufferCache) private readonly cache: BufferCache,
    @Inject(SingleFlightEngine) private readonly engine: SingleFlightEngine,
    @Inject(Reflector) private readonly reflector: Reflector,
  ) {}

  async intercept(context: ExecutionContext, next: CallHandler): Promise<Observable<unknown>> {
    const route = this.reflector.getAllAndOverride<IdempotentRoute | undefined>(
      IDEMPOTENT_METADATA,
      [context.getHandler(), context.getClass()],
    );
    const adapter = this.httpAdapterHost?.httpAdapter;
    if (!route) return next.handle();
    if (context.getType() !== 'http' || !adapter) {
      const names = {
        CLASS: context.getClass().name,
        METHOD: context.getHandler().name,
        TYPE: context.getType(),
      };
      throw new LockError(
        'idempotent_http_only',
        this.messages.render('idempotent_http_only', names),
      );
    }
    const { options } = route;
    const request = context.switchToHttp().getRequest<Request>();
    const response: unknown = context.switchToHttp().getResponse();
    const method: unknown = adapter.getRequestMethod(request);
    if (SAFE_METHODS.has(method)) return next.handle();
    const header = options.header;
    const key = request.headers?.[header.toLowerCase()];
    if (key === undefined) {
      if (!options.required) return next.handle();
      throw this.refusal('idempotency_key_missing', header);
    }
    if (typeof key !== 'string' || key === '' || key.length > MAX_KEY_LENGTH) {
      throw this.refusal('idempotency_key_invalid', header);
    }
    const scope = options.scope ? await options.scope(context) : defaultScope(request.headers);
    if (typeof scope !== 'string') {
      throw new LockError(
        'idempotent_scope_invalid',
        this.messages.render('idempotent_scope_invalid'),
      );
    }
    const recordKey = recordKeyOf(scope, key);
    const fingerprint = fingerprintOf(method, adapter.getRequestUrl(request), request.body);
    const read = (this.read ??= headerReader(adapter));

    // A completed request: one store read, no lock.
    const done = await this.recordAt(recordKey);
    if (done) return this.replay(done, fingerprint, header, response);
    let ran: { value: unknown } | undefined;
    let own = false;
    const work = async (): Promise<IdempotencyRecord> => {
      // Past `lockTimeout` with the first still running: never a second run beside it.
      if (!currentFlight()?.locked) throw this.refusal('idempotency_in_progress', header);
      // Completed while this request waited for the lock.
      const found = await this.recordAt(recordKey);
      if (found) return found;
      own = true;
      let record: IdempotencyRecord;
      try {
        const value: unknown = await lastValueFrom(next.handle(), { defaultValue: undefined });
        ran = { value };
        record = recordOf(fingerprint, value, read, response);
      } catch (error) {
        const status = error instanceof HttpException ? error.getStatus() : 500;
        if (options.storeErrors && status >= 400 && status <= 499) {
          const body = (error as HttpException).getResponse();
          await this.keep(
            recordKey,
            { f: fingerprint, s: status, b: body, x: 1 },
            options.expiresAfter,
          );
        }
        throw new HandlerFailed(error);
      }
      await this.keep(recordKey, record, options.expiresAfter);
      return record;
    };

    const settings = this.settingsOf(route);
    // A request that waited in this worker for one that failed: the key is free, it runs (once).
    for (let tries = 2; ; tries--) {
      try {
        const record = (await this.engine.run(recordKey, work, settings)) as IdempotencyRecord;
        if (ran) return of(ran.value);
        return this.replay(record, fingerprint, header, response);
      } catch (error) {
        if (!(error instanceof HandlerFailed)) {
          if (error instanceof LockBusyError) throw this.refusal('idempotency_in_progress', header);
          throw error;
        }
        if (own || tries === 1) throw error.error;
      }
    }
  }

  private settingsOf(route: IdempotentRoute): SingleFlightSettings {
    let settings = this.settings.get(route);
    if (!settings) {
      const { onBusy } = route.options;
      const own = { ...route.lock, onBusy, share: false, onRedisError: 'throw' } as const;
      this.settings.set(route, (settings = this.engine.settingsFor(own)));
    }
    return settings;
  }

  /** The key's record; a store that cannot be read is no proof that there is none (503). */
  private async recordAt(recordKey: string): Promise<IdempotencyRecord | undefined> {
    try {
      return await this.cache[RECORD_GET]<IdempotencyRecord>(recordKey);
    } catch (error) {
      this.logStoreFailure(error);
      throw this.refusal('idempotency_unavailable');
    }
  }

  /** Keeps the record; one the store refuses is logged: a retry with its key runs again. */
  private async keep(recordKey: string, record: IdempotencyRecord, ttl: number): Promise<void> {
    try {
      await this.cache[RECORD_SET](recordKey, record, ttl);
    } catch (error) {
      this.logStoreFailure(error);
    }
  }

  private logStoreFailure(error: unknown): void {
    const text = this.messages.render('idempotency_store_failed', { ERROR: errorText(error) });
    Logger.error(text, 'Idempotent');
  }

  /** The record's response, marked as a replay; one made for another request is refused (422). */
  private replay(
    record: IdempotencyRecord,
    fingerprint: string,
    header: string,
    response: unknown,
  ): Observable<unknown> {
    if (record.f !== fingerprint) {
      throw this.refusal('idempotency_key_reused', header);
    }
    const adapter = this.httpAdapterHost!.httpAdapter;
    adapter.setHeader(response, 'Idempotent-Replayed', 'true');
    if (record.x) throw new HttpException(record.b as object, record.s!);
    if (record.s !== undefined) adapter.status(response, record.s);
    for (const [name, value] of Object.entries(record.h ?? {})) {
      adapter.setHeader(response, name, value);
    }
    return of(record.b);
  }

  private refusal(code: keyof typeof REFUSALS, header?: string): HttpException {
    const statusCode = REFUSALS[code];
    const message = this.messages.render(code, header === undefined ? {} : { HEADER: header });
    return new HttpException({ statusCode, code, message }, statusCode);
  }
}
