import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { FlightOptions } from '../options/buffer-lock.options.js';
import {
  CacheOptionsDto,
  isTags,
  type BufferCacheOptions,
  type CacheSettings,
} from '../options/cache.options.js';
import { optionNames, validateOptions } from '../options/validate-options.js';

const OPTION_NAMES = optionNames(CacheOptionsDto);
const MAX_KEPT_SETTINGS = 256;

/** A call's options over the cache's defaults, validated once per set of values. */
export class CallSettings {
  // Settings by their values: callers pass a new literal each call, and validating costs.
  private readonly kept = new Map<string, CacheSettings>();
  private readonly defaults: CacheSettings;

  /** The module's `cacheDefaults`; `lockTtl` and `lockTimeout` default to its own. */
  constructor(
    options: Pick<FlightOptions, 'cacheDefaults' | 'ttl' | 'lockTimeout'>,
    private readonly messages: BufferLockMessages,
  ) {
    const { cacheDefaults } = options;
    this.defaults = {
      ...cacheDefaults,
      lockTtl: cacheDefaults.lockTtl ?? options.ttl,
      lockTimeout: cacheDefaults.lockTimeout ?? options.lockTimeout,
    };
  }

  of(options: BufferCacheOptions | undefined): CacheSettings {
    if (options === undefined) return this.defaults;
    const id = idOf(options);
    const kept = id === undefined ? undefined : this.kept.get(id);
    if (kept) return kept;
    const own = validateOptions(CacheOptionsDto, options, this.messages, 'partial');
    const settings: Record<string, unknown> = { ...this.defaults };
    for (const [name, value] of Object.entries(own))
      if (value !== undefined) settings[name] = value;
    if (this.kept.size >= MAX_KEPT_SETTINGS) this.kept.clear();
    if (id !== undefined) this.kept.set(id, settings as CacheSettings);
    return settings as CacheSettings;
  }
}

/**
 * The options' names and values; `undefined` for a name the cache does not know (it is refused)
 * or a value that is no number or string: `['30']` must not pass for `'30'`.
 */
function idOf(options: BufferCacheOptions): string | undefined {
  let id = '';
  for (const name of Object.keys(options)) {
    const value: unknown = options[name as keyof BufferCacheOptions];
    if (value === undefined) continue;
    if (!OPTION_NAMES.has(name)) return undefined;
    if (typeof value === 'number' || typeof value === 'boolean') id += `${name}:${value}|`;
    else if (name === 'tags' && isTags(value)) id += `${name}:${JSON.stringify(value)}|`;
    else if (typeof value === 'string') id += `${name}:${JSON.stringify(value)}|`;
    else return undefined;
  }
  return id;
}
