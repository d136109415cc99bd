import { afterAll, afterEach, beforeAll } from 'vitest';

/**
 * Every unhandled rejection and uncaught exception while the file's tests run, emptied after each
 * test: a test that expects `[]` proves that nothing the library did escaped its callers.
 */
export function collectEscapes(): unknown[] {
  const escaped: unknown[] = [];
  const record = (error: unknown): void => void escaped.push(error);
  beforeAll(() => {
    process.on('unhandledRejection', record);
    process.on('uncaughtException', record);
  });
  afterAll(() => {
    process.off('unhandledRejection', record);
    process.off('uncaughtException', record);
  });
  afterEach(() => {
    escaped.length = 0;
  });
  return escaped;
}

/** Lets a late rejection or a throw inside setImmediate happen before the test looks. */
export const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 100));
