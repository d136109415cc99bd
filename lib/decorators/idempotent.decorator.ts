import { applyDecorators, SetMetadata, UseInterceptors } from '@nestjs/common';
import {
  IDEMPOTENT_METADATA,
  IdempotencyInterceptor,
  type IdempotentRoute,
} from '../cache/idempotency.interceptor.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { IdempotentOptionsDto, type IdempotentOptions } from '../options/idempotent.options.js';
import { isPlainObject } from '../options/rules.js';
import { resolveSingleFlightOptions } from '../options/single-flight.options.js';
import { validateOptions } from '../options/validate-options.js';
import { configError } from './method-metadata.js';

/**
 * Runs a POST, PUT, PATCH or DELETE once per `Idempotency-Key` across the fleet, as the IETF
 * draft "The Idempotency-Key HTTP Header Field" describes: the first request with a key runs
 * under a Redis lock; a retry gets its response again (status, headers, body, and
 * `Idempotent-Replayed: true`) for `expiresAfter`; one sent while it still runs gets a 409 (or
 * waits for it, `onBusy: 'wait'`); the key reused for another request (method, URL, body) gets a
 * 422; a request without the key a 400 (or just runs, `required: false`). Keys are the caller's
 * (`Authorization` and `Cookie`, or `scope`); a handler that fails leaves its key free. On a
 * route, or on a controller for all of its unsafe routes.
 *
 * @example
 * ```ts
 * @Post('orders')
 * @Idempotent()
 * create(@Body() order: NewOrder): Promise<Order> {
 *   return this.orders.create(order); // once per key, whatever the retries
 * }
 * ```
 */
export function Idempotent(options: IdempotentOptions = {}): MethodDecorator & ClassDecorator {
  const messages = new BufferLockMessages();
  if (!isPlainObject(options)) {
    throw configError(messages, 'options', 'idempotent_options_invalid', undefined, options);
  }
  const own = validateOptions(IdempotentOptionsDto, options, messages);
  const lock = resolveSingleFlightOptions({ ttl: own.ttl, lockTimeout: own.lockTimeout }, messages);
  const route: IdempotentRoute = { options: Object.freeze(own), lock };
  return applyDecorators(
    SetMetadata(IDEMPOTENT_METADATA, route),
    UseInterceptors(IdempotencyInterceptor),
  );
}
