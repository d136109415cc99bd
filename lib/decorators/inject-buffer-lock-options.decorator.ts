import { Inject } from '@nestjs/common';
import { BUFFER_LOCK_OPTIONS } from '../options/buffer-lock.constants.js';

/**
 * Injects `BufferLockModule`'s validated options.
 *
 * @example
 * ```ts
 * constructor(@InjectBufferLockOptions() private readonly options: ResolvedBufferLockOptions) {}
 * ```
 */
export const InjectBufferLockOptions = (): PropertyDecorator & ParameterDecorator =>
  Inject(BUFFER_LOCK_OPTIONS);
