import { Rule, Seconds } from './validate-options.js';

// The rules and defaults of the module option `l1`.
export class L1OptionsDto {
  @Rule('l1_max_entries_invalid', (v) => Number.isSafeInteger(v) && (v as number) > 0)
  maxEntries: number = 10_000;

  @Seconds('l1_max_age_invalid', { timed: true })
  maxAge: number = 5;
}

/** The in-process tier's settings, or `false` when there is none. */
export type L1Settings = Readonly<L1OptionsDto> | false;
