import { Injectable } from '@nestjs/common';
import {
  ENGLISH_MESSAGES,
  type MessageCatalog,
  type MessageId,
  type MessageParams,
} from './messages.catalog.js';
import { textOf } from './error-text.js';

/**
 * How a {@link BufferLockMessages} picks its texts.
 *
 * @example
 * ```ts
 * const settings: MessageSettings = {
 *   locale: 'de',
 *   catalogs: { de: { redis_no_client: 'Die Client-Fabrik lieferte keinen Client' } },
 *   messages: { redis_lock_failed: '🔒 Redis: ERROR' },
 * };
 * ```
 */
export interface MessageSettings {
  /** The catalog to use, by its name in `catalogs`. Default `'en'`. */
  locale?: string;
  /** Extra catalogs by locale. Ids a catalog leaves out fall back to English. */
  catalogs?: Readonly<Record<string, MessageCatalog>>;
  /** Single texts that win over every catalog. Any characters, emoji included. */
  messages?: MessageCatalog;
}

const PLACEHOLDER = /\b[A-Z][A-Z_]*[A-Z]\b/g;

/**
 * Renders every text the library emits: errors, log lines and HTTP error bodies. Texts are looked
 * up by message id in this order: `messages` overrides, the `locale`'s catalog, English.
 *
 * In a Nest app it is a provider of `BufferLockModule`; override it (for example with a class
 * that calls nestjs-i18n) to plug in your own translator. Without Nest, `RedisLockService` makes
 * one from its `messages` option.
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

  /** The locale whose catalog is in use. */
  readonly locale: string;

  constructor(settings: MessageSettings = {}) {
    this.locale = settings.locale ?? 'en';
    this.texts = {
      ...ENGLISH_MESSAGES,
      ...settings.catalogs?.[this.locale],
      ...settings.messages,
    };
  }

  /**
   * The text for `id` with its placeholders filled in from `params`. A placeholder without a value
   * is left as it is, and so is everything in a value (it is never read as a placeholder).
   */
  render(id: MessageId, params: MessageParams = {}): string {
    const text = this.template(id);
    return text.replace(PLACEHOLDER, (word) =>
      Object.hasOwn(params, word) ? textOf(params[word]) : word,
    );
  }

  /** The raw text for `id`, placeholders included. Override this to plug in a translator. */
  template(id: MessageId): string {
    return this.texts[id] ?? ENGLISH_MESSAGES[id];
  }
}
