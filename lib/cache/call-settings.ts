import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { validateOptions } from '../options/validate-options.js';
import {
  CacheOptionsDto,
  type BufferCacheOptions,
  type CacheSettings,
} from '../options/cache.options.js';

const OPTION_NAMES = ['ttl', 'grace', 'timeout', 'lockTtl', 'lockTimeout'] as const;
const MAX_KEPT = 1000;

/**
 * The values of `options` as one text, or `undefined` when one is neither a number nor a string
 * (then it is validated every time: `['30']` must not pass for `'30'`).
 */
function idOf(options: BufferCacheOptions): string | undefined {
  let id = '';
  for (const name of OPTION_NAMES) {
    const value: unknown = options[name];
    if (value !== undefined && typeof value !== 'number' && typeof value !== 'string') {
      return undefined;
    }
    id += `${typeof value}:${String(value)}|`;
  }
  return id;
}

/**
 * A cached call's settings: its options over the defaults, validated once per set of values.
 * Callers pass a new object literal on every call, and validation costs far more than a read.
 *
 * @example
 * ```ts
 * const defaults = { ttl: 60, grace: 0, timeout: 0, lockTtl: 30, lockTimeout: 5 };
 * const callSettings = new CallSettings(defaults, messages);
 * const settings = callSettings.of({ ttl: 30, grace: 300 }); // validated once for these values
 * ```
 */
export class CallSettings {
  private readonly kept = new Map<string, CacheSettings>();

  constructor(
    private readonly defaults: CacheSettings,
    private readonly messages: BufferLockMessages,
  ) {}

  /** The settings of a call with `options`. Throws a `BufferLockConfigError` for bad ones. */
  of(options: BufferCacheOptions | undefined): CacheSettings {
    if (options === undefined) return this.defaults;
    const id = idOf(options);
    let settings = id === undefined ? undefined : this.kept.get(id);
    if (settings) return settings;
    const own = validateOptions(CacheOptionsDto, options, this.messages, 'partial');
    const merged: Record<string, unknown> = { ...this.defaults };
    for (const [name, value] of Object.entries(own)) if (value !== undefined) merged[name] = value;
    settings = merged as CacheSettings;
    // Only valid values get here; a program that makes options up endlessly starts over.
    if (this.kept.size >= MAX_KEPT) this.kept.clear();
    if (id !== undefined) this.kept.set(id, settings);
    return settings;
  }
}
