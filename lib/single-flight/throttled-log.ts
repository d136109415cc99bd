import type { LoggerService } from '@nestjs/common';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';

interface Window {
  since: number;
  suppressed: number;
}

/**
 * At most one line per message id per `interval`, so that an outage does not flood the log; the
 * lines dropped meanwhile are counted into the next one (`log_suppressed`).
 */
export class ThrottledLog {
  private readonly windows = new Map<MessageId, Window>();

  constructor(
    private readonly logger: LoggerService,
    private readonly messages: BufferLockMessages,
    private readonly interval: number,
    private readonly now: () => number = Date.now,
  ) {}

  error(id: MessageId, line: string): void {
    const text = this.admit(id, line);
    if (text !== undefined) this.logger.error(text);
  }

  log(id: MessageId, line: string): void {
    const text = this.admit(id, line);
    if (text !== undefined) this.logger.log(text);
  }

  warn(id: MessageId, line: string): void {
    const text = this.admit(id, line);
    if (text !== undefined) this.logger.warn(text);
  }

  private admit(id: MessageId, line: string): string | undefined {
    const now = this.now();
    const window = this.windows.get(id);
    if (window && now - window.since < this.interval) {
      window.suppressed++;
      return undefined;
    }
    this.windows.set(id, { since: now, suppressed: 0 });
    if (!window || window.suppressed === 0) return line;
    return this.messages.render('log_suppressed', {
      LINE: line,
      COUNT: window.suppressed,
      SECONDS: Math.round((now - window.since) / 1000),
    });
  }
}
