import { IsIn, ValidateIf } from 'class-validator';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { RedisLockOptionsDto } from './redis-lock.options.js';
import { given } from './rules.js';
import { parseSeconds, type SecondsResolved, type SecondsOption } from './seconds.js';
import { Rule, Seconds, validateOptions } from './validate-options.js';

const ON_BUSY_MODES = ['wait', 'skip', 'throw'] as const;
const ON_REDIS_ERROR_MODES = ['proceed', 'throw'] as const;

// Broken only when both are valid and out of order: each invalid one has its own violation.
const isShorterThanTtl = (value: unknown, options: Record<string, unknown>): boolean => {
  const lockTimeout = parseSeconds(value);
  const ttl = parseSeconds(options.ttl);
  return lockTimeout === undefined || ttl === undefined || lockTimeout < ttl;
};

/**
 * The options of one `@SingleFlight` method or `SingleFlightEngine.run`; each one left out takes
 * the module's value.
 *
 * @example
 * ```ts
 * const options: SingleFlightOptions = { ttl: 120, lockTimeout: 30, onBusy: 'throw' };
 * ```
 */
export interface SingleFlightOptions {
  /** Seconds the lock lives in Redis, extended every ttl/3 while the method runs. */
  ttl?: SecondsOption;
  /** Seconds a caller waits for the holder. Below `ttl`. Default `10`. */
  lockTimeout?: SecondsOption;
  /** When another worker holds the lock: wait (up to `lockTimeout`), skip, or throw (409). */
  onBusy?: 'wait' | 'skip' | 'throw';
  /** Share the leader's result with other processes' waiters (not for `@Res()`). Default `false`. */
  share?: boolean;
  /** When Redis cannot be asked: proceed without the lock (logged), or throw (503). */
  onRedisError?: 'proceed' | 'throw';
  /** Seconds the watchdog may keep extending the lock (every ttl/3) in all. Default: no cap. */
  maxHold?: SecondsOption;
}

// The lock's rules and defaults plus a flight's; a call may set `ttl` and these for itself.
export class SingleFlightOptionsDto extends RedisLockOptionsDto implements SingleFlightOptions {
  @Seconds('lock_timeout_invalid', { timed: true })
  @Rule('lock_timeout_not_below_ttl', isShorterThanTtl, ['ttl'])
  lockTimeout: number = 10;

  @IsIn(ON_BUSY_MODES, { message: 'on_busy_invalid' })
  onBusy: (typeof ON_BUSY_MODES)[number] = 'wait';

  @Rule('share_invalid', (v) => typeof v === 'boolean')
  share: boolean = false;

  @IsIn(ON_REDIS_ERROR_MODES, { message: 'on_redis_error_invalid' })
  onRedisError: (typeof ON_REDIS_ERROR_MODES)[number] = 'proceed';

  @ValidateIf(given)
  @Seconds('max_hold_invalid', { timed: true })
  maxHold?: number = undefined;
}

const PER_CALL = ['ttl', 'lockTimeout', 'onBusy', 'share', 'onRedisError', 'maxHold'] as const;
const PER_CALL_NAMES: ReadonlySet<string> = new Set(PER_CALL);

/** A call's own options over the module's. */
export type SingleFlightSettings = Readonly<
  SecondsResolved<Required<Omit<SingleFlightOptions, 'maxHold'>>>
> &
  SecondsResolved<Pick<SingleFlightOptions, 'maxHold'>>;

/** The per-call options given, validated (seconds as numbers); any other name is refused. */
export function resolveSingleFlightOptions(
  input: SingleFlightOptions,
  messages: BufferLockMessages,
): SecondsResolved<SingleFlightOptions> {
  const own = validateOptions(SingleFlightOptionsDto, input, messages, 'partial', PER_CALL_NAMES);
  return Object.fromEntries(PER_CALL.filter((k) => Object.hasOwn(own, k)).map((k) => [k, own[k]]));
}

export function perCallSettings(
  options: Pick<SingleFlightOptionsDto, (typeof PER_CALL)[number]>,
): SingleFlightSettings {
  return Object.fromEntries(PER_CALL.map((k) => [k, options[k]])) as SingleFlightSettings;
}
