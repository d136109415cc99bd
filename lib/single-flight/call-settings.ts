import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { attempt } from '../messages/error-text.js';
import {
  resolveSingleFlightOptions,
  type SingleFlightOptions,
  type SingleFlightSettings,
} from '../options/single-flight.options.js';

/** Most validated per-call settings kept at once; past it they are checked anew. */
const MAX_KEPT = 256;

const PER_CALL: ReadonlySet<string> = new Set([
  'ttl',
  'lockTimeout',
  'onBusy',
  'share',
  'onRedisError',
  'maxHold',
]);

/**
 * A call's options as text, to find them validated already; `undefined` (checked anew) for a
 * name that is no per-call option, or a value that is no number, boolean or string: `['30']` must
 * not pass for `'30'`.
 */
function idOf(options: object): string | undefined {
  let id = '';
  for (const name of Object.keys(options)) {
    const value: unknown = (options as Record<string, unknown>)[name];
    if (value === undefined) continue;
    if (!PER_CALL.has(name)) return undefined;
    if (typeof value === 'number' || typeof value === 'boolean') id += `${name}:${value}|`;
    else if (typeof value === 'string') id += `${name}:${JSON.stringify(value)}|`;
    else return undefined;
  }
  return id;
}

/**
 * Marks settings made here as complete, used as they are when handed back. A property, not a
 * WeakSet of every settings object made: no table to fill per call. Not enumerable, so a spread
 * copy (`{ ...settings, ttl: x }`) is checked anew.
 */
const COMPLETE = Symbol('complete settings');
function markComplete(settings: object): void {
  Object.defineProperty(settings, COMPLETE, { value: true });
}

/**
 * A call's options over the engine's defaults, validated once per set of values: an invalid one
 * is refused with a `BufferLockConfigError`, never run without the lock.
 */
export class CallSettings {
  private readonly kept = new Map<string, SingleFlightSettings>();

  constructor(
    readonly defaults: SingleFlightSettings,
    private readonly messages: BufferLockMessages,
  ) {
    markComplete(defaults);
  }

  of(options?: SingleFlightOptions | SingleFlightSettings): SingleFlightSettings {
    if (options === undefined) return this.defaults;
    if (Object.hasOwn(options, COMPLETE)) return options as SingleFlightSettings;
    // Options whose getters or Proxy traps throw are read (and refused) by the validation.
    const id = attempt(() => idOf(options), undefined);
    const kept = id === undefined ? undefined : this.kept.get(id);
    if (kept) return kept;
    const own = resolveSingleFlightOptions(options, this.messages);
    const settings: Record<string, unknown> = { ...this.defaults };
    for (const [key, value] of Object.entries(own)) {
      if (value !== undefined) settings[key] = value;
    }
    markComplete(settings);
    if (this.kept.size >= MAX_KEPT) this.kept.clear();
    if (id !== undefined) this.kept.set(id, settings as SingleFlightSettings);
    return settings as SingleFlightSettings;
  }
}
