import type { LoggerService } from '@nestjs/common';

/** A logger that keeps its lines, so tests can assert what the library wrote and how often. */
export class MemoryLogger implements LoggerService {
  readonly lines: { level: 'log' | 'warn' | 'error'; text: string }[] = [];
  log(text: unknown): void {
    this.lines.push({ level: 'log', text: String(text) });
  }
  warn(text: unknown): void {
    this.lines.push({ level: 'warn', text: String(text) });
  }
  error(text: unknown): void {
    this.lines.push({ level: 'error', text: String(text) });
  }
  at(level: 'log' | 'warn' | 'error'): string[] {
    return this.lines.filter((line) => line.level === level).map((line) => line.text);
  }
}

/** A promise with its resolve function, for ordering steps between concurrent calls. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** Waits until `check` holds, polling; fails after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}
