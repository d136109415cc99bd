import type { ExecutionContext } from '@nestjs/common';
import { IsIn, ValidateIf } from 'class-validator';
import { given } from './rules.js';
import type { SecondsOption } from './seconds.js';
import { Rule, Seconds } from './validate-options.js';

const ON_BUSY_MODES = ['throw', 'wait'] as const;

// An HTTP field name (RFC 9110 §5.1: a token).
const isHeaderName = (value: unknown): boolean =>
  typeof value === 'string' && /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(value);

/**
 * The options of one `@Idempotent` route; each one left out takes its default, and the lock's
 * (`ttl`, `lockTimeout`) take the module's.
 *
 * @example
 * ```ts
 * const options: IdempotentOptions = { onBusy: 'wait', scope: (context) => userIdOf(context) };
 * ```
 */
export interface IdempotentOptions {
  /** The request header that carries the key. Default `'Idempotency-Key'`. */
  header?: string;
  /**
   * The key, as a function of the handler's context, in place of the header: required on a
   * message handler (`@MessagePattern`, `@EventPattern`), where it reads the message.
   */
  key?: (context: ExecutionContext) => string | undefined | Promise<string | undefined>;
  /** Whether a request (or message) without a key is refused, with a 400, or just runs. Default `true`. */
  required?: boolean;
  /** Seconds a completed request's response is replayed for. Default `86400` (24 h). */
  expiresAfter?: SecondsOption;
  /**
   * While the first request with the key still runs: answer 409 (`'throw'`), or wait for it (up
   * to `lockTimeout`) and answer with its response (`'wait'`). Default `'throw'`.
   */
  onBusy?: 'throw' | 'wait';
  /**
   * Seconds the running request's lock lives in Redis, extended while it runs: the key of a
   * worker that died mid-request is free again after this. Default: the module's `ttl`.
   */
  ttl?: SecondsOption;
  /** Seconds a request waits for the first one with `onBusy: 'wait'`. Default: the module's. */
  lockTimeout?: SecondsOption;
  /**
   * Whose keys these are: two callers with different scopes never share a response. Default: the
   * request's `Authorization` and `Cookie` headers.
   */
  scope?: (context: ExecutionContext) => string | Promise<string>;
  /** Whether a handler's 4xx `HttpException` is kept and replayed as its response. Default `false`. */
  storeErrors?: boolean;
}

// The rules and defaults of `@Idempotent`'s own options; `ttl` and `lockTimeout` are the lock's.
export class IdempotentOptionsDto {
  @Rule('idempotent_header_invalid', isHeaderName)
  header: string = 'Idempotency-Key';

  @ValidateIf(given)
  @Rule('idempotent_key_invalid', (v) => typeof v === 'function')
  key?: (context: ExecutionContext) => string | undefined | Promise<string | undefined> = undefined;

  @Rule('idempotent_required_invalid', (v) => typeof v === 'boolean')
  required: boolean = true;

  @Seconds('idempotent_expires_after_invalid')
  expiresAfter: number = 86_400;

  @IsIn(ON_BUSY_MODES, { message: 'idempotent_on_busy_invalid' })
  onBusy: (typeof ON_BUSY_MODES)[number] = 'throw';

  @ValidateIf(given)
  @Rule('idempotent_scope_invalid', (v) => typeof v === 'function')
  scope?: (context: ExecutionContext) => string | Promise<string> = undefined;

  @Rule('idempotent_store_errors_invalid', (v) => typeof v === 'boolean')
  storeErrors: boolean = false;

  // Checked as the lock's options, by the engine: declared here as known names.
  ttl?: SecondsOption = undefined;
  lockTimeout?: SecondsOption = undefined;
}
