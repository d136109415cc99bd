import { Rule, Seconds } from './validate-options.js';

// The rules and defaults of the module option `writeReplicas`.
export class WriteReplicasOptionsDto {
  @Rule('write_replicas_count_invalid', (v) => Number.isSafeInteger(v) && (v as number) > 0)
  replicas: number = 1;

  @Seconds('write_replicas_timeout_invalid', { timed: true })
  timeout: number = 0.5;
}

/** How many replicas a cache write waits for, and how long; `false`: none. */
export type WriteReplicasSettings = Readonly<WriteReplicasOptionsDto> | false;
