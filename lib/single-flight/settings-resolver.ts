import type {
  SingleFlightOptions,
  SingleFlightSettings,
} from '../options/single-flight.options.js';

/**
 * A call's options over the engine's defaults, complete. The settings it made are remembered, so
 * a caller that keeps them (a decorated method) and passes them again has them used as they are.
 *
 * @example
 * ```ts
 * const settings = new SettingsResolver(perCallSettings(options));
 * const skipping: SingleFlightSettings = settings.resolve({ onBusy: 'skip' });
 * ```
 */
export class SettingsResolver {
  /** Settings objects made by {@link resolve}: complete, so used as they are. */
  private readonly complete = new WeakSet<SingleFlightSettings>();

  constructor(private readonly defaults: SingleFlightSettings) {
    this.complete.add(defaults);
  }

  /** `options` over the defaults, complete; the defaults themselves without `options`. */
  resolve(options?: SingleFlightOptions | SingleFlightSettings): SingleFlightSettings {
    if (options === undefined || this.complete.has(options as SingleFlightSettings)) {
      return (options as SingleFlightSettings | undefined) ?? this.defaults;
    }
    const settings: Record<string, unknown> = { ...this.defaults };
    for (const [key, value] of Object.entries(options)) {
      if (value !== undefined) settings[key] = value;
    }
    this.complete.add(settings as SingleFlightSettings);
    return settings as SingleFlightSettings;
  }
}
