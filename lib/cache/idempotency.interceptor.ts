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
import { RedisUnavailableError } from '../errors/redis-unavailable.error.js';
import { LockError } from '../errors/lock.error.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { MessageId } from '../messages/messages.catalog.js';
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
import { messageKeyOf, patternOf } from './rpc-message.js';
import { headerReader, type HeaderReader } from './http-response.js';
import { fingerprintOf } from './call-digest.js';
import {
  defaultScope,
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

type Refusal = 'missing' | 'invalid' | 'reused' | 'in_progress' | 'unavailable';

// What a request or a message is refused with, by its message id, and the status it carries.
const REFUSALS: Readonly<Record<'http' | 'rpc', Record<Refusal, [MessageId, number]>>> = {
  http: {
    missing: ['idempotency_key_missing', 400],
    invalid: ['idempotency_key_invalid', 400],
    in_progress: ['idempotency_in_progress', 409],
    reused: ['idempotency_key_reused', 422],
    unavailable: ['idempotency_unavailable', 503],
  },
  rpc: {
    missing: ['idempotency_message_key_missing', 400],
    invalid: ['idempotency_message_key_invalid', 400],
    in_progress: ['idempotency_message_in_progress', 409],
    reused: ['idempotency_message_key_reused', 422],
    unavailable: ['idempotency_unavailable', 503],
  },
};

// Loaded by the first message only: an app without message handlers never needs the package.
let microservices: Promise<typeof import('@nestjs/microservices')> | undefined;

type Request = { readonly headers?: RequestHeaders; readonly body?: unknown };

/** One request or message, as its key's record knows it. */
interface Call {
  readonly recordKey: string;
  readonly fingerprint: string;
  /** An HTTP request's response (its status and headers are kept and replayed), else none. */
  readonly http?: { readonly response: unknown; readonly read: HeaderReader };
  /** The error a refusal is thrown as: an `HttpException`, or an `RpcException` for a message. */
  readonly refuse: (refusal: Refusal) => Error;
}

// The handler's own error, rethrown as it was to the request that ran it.
class HandlerFailed {
  constructor(readonly error: unknown) {}
}

/**
 * Runs an unsafe request, or a message, once per key across the fleet: the first runs under a
 * Redis lock, a retry or a redelivery is answered with its outcome; applied by `@Idempotent`.
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
    if (!route) return next.handle();
    const call =
      context.getType() === 'rpc'
        ? await this.messageCall(context, route.options)
        : await this.requestCall(context, route.options);
    return call ? this.once(call, route, next) : next.handle();
  }

  /** An unsafe HTTP request: its key from the header (or `key`), its caller from `scope`. */
  private async requestCall(
    context: ExecutionContext,
    options: IdempotentRoute['options'],
  ): Promise<Call | undefined> {
    const adapter = this.httpAdapterHost?.httpAdapter;
    if (context.getType() !== 'http' || !adapter) {
      const names = {
        CLASS: context.getClass().name,
        METHOD: context.getHandler().name,
        TYPE: context.getType(),
      };
      const text = this.messages.render('idempotent_context_unsupported', names);
      throw new LockError('idempotent_context_unsupported', text);
    }
    const refuse = (refusal: Refusal): Error => this.httpRefusal(refusal, options.header);
    const request = context.switchToHttp().getRequest<Request>();
    const method: unknown = adapter.getRequestMethod(request);
    if (SAFE_METHODS.has(method)) return undefined;
    const key = options.key
      ? await options.key(context)
      : request.headers?.[options.header.toLowerCase()];
    const scope = options.scope ? await options.scope(context) : defaultScope(request.headers);
    const recordKey = this.recordKey(key, scope, options.required, refuse);
    if (recordKey === undefined) return undefined;
    const fingerprint = fingerprintOf(method, adapter.getRequestUrl(request), request.body);
    const response: unknown = context.switchToHttp().getResponse();
    const read = (this.read ??= headerReader(adapter));
    return { recordKey, fingerprint, http: { response, read }, refuse };
  }

  /** A message (`@MessagePattern`, `@EventPattern`): its key from `key`, its data the fingerprint. */
  private async messageCall(
    context: ExecutionContext,
    options: IdempotentRoute['options'],
  ): Promise<Call | undefined> {
    const { RpcException } = await (microservices ??= import('@nestjs/microservices'));
    const refuse = (refusal: Refusal): Error => {
      const [id, statusCode] = REFUSALS.rpc[refusal];
      const names = { CLASS: context.getClass().name, METHOD: context.getHandler().name };
      return new RpcException({ statusCode, code: id, message: this.messages.render(id, names) });
    };
    const key = options.key ? await options.key(context) : undefined;
    const scope = options.scope ? await options.scope(context) : '';
    const recordKey = this.recordKey(key, scope, options.required, refuse);
    if (recordKey === undefined) return undefined;
    const pattern = patternOf(this.reflector, context.getHandler());
    const fingerprint = messageKeyOf(pattern, context.switchToRpc().getData());
    return { recordKey, fingerprint, refuse };
  }

  /** The record's key, or `undefined` when a call without a key may run as it is. */
  private recordKey(
    key: unknown,
    scope: unknown,
    required: boolean,
    refuse: (refusal: Refusal) => Error,
  ): string | undefined {
    if (key === undefined || key === null) {
      if (!required) return undefined;
      throw refuse('missing');
    }
    if (typeof key !== 'string' || key === '' || key.length > MAX_KEY_LENGTH) {
      throw refuse('invalid');
    }
    if (typeof scope !== 'string') {
      const text = this.messages.render('idempotent_scope_invalid');
      throw new LockError('idempotent_scope_invalid', text);
    }
    return recordKeyOf(scope, key);
  }

  /** The call's outcome: the record's when there is one, else its own run under the key's lock. */
  private async once(
    call: Call,
    route: IdempotentRoute,
    next: CallHandler,
  ): Promise<Observable<unknown>> {
    const { recordKey, fingerprint, http } = call;
    const { storeErrors, expiresAfter } = route.options;
    // A completed one: one store read, no lock.
    const done = await this.recordAt(call);
    if (done) return this.replay(done, call);
    let ran: { value: unknown } | undefined;
    let own = false;
    const work = async (): Promise<IdempotencyRecord> => {
      // Past `lockTimeout` with the first still running: never a second run beside it.
      if (!currentFlight()?.locked) throw call.refuse('in_progress');
      // Completed while this one waited for the lock.
      const found = await this.recordAt(call);
      if (found) return found;
      own = true;
      let record: IdempotencyRecord;
      try {
        const value: unknown = await lastValueFrom(next.handle(), { defaultValue: undefined });
        ran = { value };
        record = http
          ? recordOf(fingerprint, value, http.read, http.response)
          : { f: fingerprint, b: value };
      } catch (error) {
        const status = error instanceof HttpException ? error.getStatus() : 500;
        if (http && storeErrors && status >= 400 && status <= 499) {
          const body = (error as HttpException).getResponse();
          await this.keep(recordKey, { f: fingerprint, s: status, b: body, x: 1 }, expiresAfter);
        }
        throw new HandlerFailed(error);
      }
      await this.keep(recordKey, record, expiresAfter);
      return record;
    };

    const settings = this.settingsOf(route);
    // One that waited in this worker for one that failed: the key is free, it runs (once).
    for (let tries = 2; ; tries--) {
      try {
        const record = (await this.engine.run(recordKey, work, settings)) as IdempotencyRecord;
        if (ran) return of(ran.value);
        return this.replay(record, call);
      } catch (error) {
        if (!(error instanceof HandlerFailed)) {
          if (error instanceof LockBusyError) throw call.refuse('in_progress');
          if (error instanceof RedisUnavailableError) throw call.refuse('unavailable');
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
  private async recordAt(call: Call): Promise<IdempotencyRecord | undefined> {
    try {
      return await this.cache[RECORD_GET]<IdempotencyRecord>(call.recordKey);
    } catch (error) {
      this.logStoreFailure(error);
      throw call.refuse('unavailable');
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

  /** The record's outcome, marked as a replay over HTTP; one made for another call is refused. */
  private replay(record: IdempotencyRecord, call: Call): Observable<unknown> {
    if (record.f !== call.fingerprint) throw call.refuse('reused');
    if (!call.http) return of(record.b);
    const { response } = call.http;
    const adapter = this.httpAdapterHost!.httpAdapter;
    adapter.setHeader(response, 'Idempotent-Replayed', 'true');
    if (record.x) throw new HttpException(record.b as object, record.s!);
    if (record.s !== undefined) adapter.status(response, record.s);
    for (const [name, value] of Object.entries(record.h ?? {})) {
      adapter.setHeader(response, name, value);
    }
    return of(record.b);
  }

  private httpRefusal(refusal: Refusal, header: string): HttpException {
    const [id, statusCode] = REFUSALS.http[refusal];
    const message = this.messages.render(id, { HEADER: header });
    return new HttpException({ statusCode, code: id, message }, statusCode);
  }
}
