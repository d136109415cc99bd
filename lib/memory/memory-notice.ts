import type { LoggerService } from '@nestjs/common';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';

/**
 * Logs, once per module or lock service that starts on `memory://`, that it coordinates this
 * process only (`memory_backend`), so that no one takes it for a lock across workers.
 *
 * @example
 * ```ts
 * announceMemoryBackend(new Logger('BufferLock'), new BufferLockMessages());
 * ```
 */
export function announceMemoryBackend(logger: LoggerService, messages: BufferLockMessages): void {
  logger.log(messages.render('memory_backend'));
}
