import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { BufferLockOptionsDto, type ResolvedBufferLockOptions } from './buffer-lock.options.js';
import { readableCopy, validateOptions } from './validate-options.js';

/** The module options a `@SingleFlight` method may set for itself. */
const PER_CALL = ['ttl', 'lockTimeout', 'onBusy', 'share', 'onRedisError', 'maxHold'] as const;

/**
 * The options of one `@SingleFlight` method (or one `SingleFlightEngine.run`). Each one left out
 * takes the module's value.
 *
 * @example
 * ```ts
 * const options: SingleFlightOptions = { ttl: 120, lockTimeout: 30, onBusy: 'throw' };
 * ```
 */
export type SingleFlightOptions = Partial<Pick<BufferLockOptionsDto, (typeof PER_CALL)[number]>>;

/**
 * The per-call settings, complete: a call's own options over the module's.
 *
 * @example
 * ```ts
 * const settings: SingleFlightSettings = { ...perCallSettings(options), ttl: 120 };
 * ```
 */
export type SingleFlightSettings = Readonly<Required<Omit<SingleFlightOptions, 'maxHold'>>> &
  Pick<SingleFlightOptions, 'maxHold'>;

/**
 * Validates the options of one `@SingleFlight` method when its class is defined and returns the
 * ones given, seconds as numbers. Throws one `BufferLockConfigError` listing every violation.
 *
 * @example
 * ```ts
 * resolveSingleFlightOptions({ ttl: 120, onBusy: 'skip' }, messages); // { ttl: 120, onBusy: 'skip' }
 * ```
 */
export function resolveSingleFlightOptions(
  input: SingleFlightOptions,
  messages: BufferLockMessages,
): SingleFlightOptions {
  const source = readableCopy(input);
  const own = Object.fromEntries(PER_CALL.filter((k) => k in source).map((k) => [k, source[k]]));
  const dto = validateOptions(BufferLockOptionsDto, own, messages, 'partial');
  return Object.fromEntries(PER_CALL.filter((k) => k in own).map((k) => [k, dto[k]]));
}

/**
 * Every per-call setting of `options`, as the engine's defaults.
 *
 * @example
 * ```ts
 * const defaults: SingleFlightSettings = perCallSettings(resolvedOptions);
 * ```
 */
export function perCallSettings(
  options: Pick<ResolvedBufferLockOptions, (typeof PER_CALL)[number]>,
): SingleFlightSettings {
  return Object.fromEntries(PER_CALL.map((k) => [k, options[k]])) as SingleFlightSettings;
}
