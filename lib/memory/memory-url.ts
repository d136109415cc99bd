import type { LoggerService } from '@nestjs/common';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';

/** `memory://` (a keyspace of its own per client) or `memory://NAME` (the process's one of that name). */
export type MemoryUrl = `memory://${string}`;

const MEMORY_URL = /^memory:\/\/([A-Za-z0-9._-]*)$/;

/** Nothing but a name may follow: `memory://user:secret@host` is no memory URL. */
export const isMemoryUrl = (value: unknown): value is MemoryUrl =>
  typeof value === 'string' && MEMORY_URL.test(value);

export const memoryUrlName = (url: MemoryUrl): string => MEMORY_URL.exec(url)?.[1] ?? '';

/** Said once per module or service on `memory://`, so that no one takes it for a lock across workers. */
export function announceMemoryBackend(logger: LoggerService, messages: BufferLockMessages): void {
  logger.log(messages.render('memory_backend'));
}
