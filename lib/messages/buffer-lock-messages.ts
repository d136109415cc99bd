import { Injectable } from '@nestjs/common';
import { ENGLISH_MESSAGES, type MessageId } from './messages.catalog.js';
import { textOf } from './error-text.js';

const PLACEHOLDER = /\b[A-Z][A-Z_]*[A-Z]\b/g;

// A parameter (a key, a URL, an error's text) goes into log lines and HTTP bodies: cut, so that a
// huge key makes no huge line, and with its control characters escaped, so that it forges none.
const PARAMETER_MAX = 200;
const CONTROL = /[\p{Cc}\u2028\u2029]/gu;
const ESCAPES: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

function printable(text: string): string {
  const cut =
    text.length > PARAMETER_MAX
      ? `${text.slice(0, PARAMETER_MAX)}… (${text.length} characters)`
      : text;
  return cut.replace(
    CONTROL,
    (c) => ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * Renders every text the library emits (errors, log lines, HTTP bodies), looking each id up in
 * `messages`, then the `locale`'s catalog in `catalogs`, then English. A provider of
 * `BufferLockModule`: override it (e.g. with a class calling nestjs-i18n) to plug in a translator.
 *
 * @example
 * ```ts
 * const messages = new BufferLockMessages({ messages: { redis_lock_failed: 'lock: ERROR' } });
 * messages.render('redis_lock_failed', { ERROR: 'timeout' }); // 'lock: timeout'
 * ```
 */
@Injectable()
export class BufferLockMessages {
  private readonly texts: Readonly<Record<MessageId, string>>;
  readonly locale: string;

  constructor(
    settings: {
      locale?: string;
      catalogs?: Readonly<Record<string, Partial<Record<MessageId, string>>>>;
      messages?: Partial<Record<MessageId, string>>;
    } = {},
  ) {
    this.locale = settings.locale ?? 'en';
    this.texts = {
      ...ENGLISH_MESSAGES,
      ...settings.catalogs?.[this.locale],
      ...settings.messages,
    };
  }

  /** The text for `id`, placeholders filled from `params`; a value is never read as a placeholder. */
  render(id: MessageId, params: Readonly<Record<string, string | number>> = {}): string {
    return this.template(id).replace(PLACEHOLDER, (word) =>
      Object.hasOwn(params, word) ? printable(textOf(params[word])) : word,
    );
  }

  /** The raw text for `id`. Override this to plug in a translator. */
  template(id: MessageId): string {
    return this.texts[id] ?? ENGLISH_MESSAGES[id];
  }
}

export type MessageSettings = NonNullable<ConstructorParameters<typeof BufferLockMessages>[0]>;
