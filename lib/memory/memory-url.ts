import type { LoggerService } from '@nestjs/common';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';

// `memory://` (a keyspace per client) or `memory://NAME` (the process's one), maybe `?maxKeys=N`.
export type MemoryUrl = `memory://${string}`;

const MEMORY_URL = /^memory:\/\/([A-Za-z0-9._-]*)(?:\?maxKeys=([1-9]\d{0,8}))?$/;

/** The keys a keyspace holds at most when its URL says no other number. */
export const DEFAULT_MAX_KEYS = 100_000;

/** Nothing but a name and `?maxKeys=` may follow: `memory://user:secret@host` is no memory URL. */
export const isMemoryUrl = (value: unknown): value is MemoryUrl =>
  typeof value === 'string' && MEMORY_URL.test(value);

export const memoryUrlName = (url: MemoryUrl): string => MEMORY_URL.exec(url)?.[1] ?? '';

export const memoryUrlMaxKeys = (url: MemoryUrl): number =>
  Number(MEMORY_URL.exec(url)?.[2] ?? DEFAULT_MAX_KEYS);

/** Said once per module or service on `memory://`, so that no one takes it for a lock across workers. */
export function announceMemoryBackend(logger: LoggerService, messages: BufferLockMessages): void {
  logger.log(messages.render('memory_backend'));
}
