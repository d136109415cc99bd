// i18n-buffer-lock-messages.ts
import { fileURLToPath } from 'node:url';
import { Injectable, type Provider } from '@nestjs/common';
import { AcceptLanguageResolver, I18nModule, I18nService } from 'nestjs-i18n';
import { BufferLockMessages, type MessageId } from '../../lib/index.js';

// The texts of nestjs-buffer-lock from nestjs-i18n, as `buffer-lock.<id>` in i18n/<lang>/buffer-lock.json.
@Injectable()
export class I18nBufferLockMessages extends BufferLockMessages {
  constructor(private readonly i18n: I18nService) {
    super();
  }

  // The request's language (I18nContext), else fallbackLanguage; an id not translated stays English.
  override template(id: MessageId): string {
    return this.i18n.t(`buffer-lock.${id}`, { defaultValue: super.template(id) });
  }
}

// For BufferLockModule's `overrides`.
export const translatedMessages: Provider = {
  provide: BufferLockMessages,
  useClass: I18nBufferLockMessages,
};

export const translations = I18nModule.forRoot({
  fallbackLanguage: 'fr', // also the language of texts outside a request, such as a bad option
  loaderOptions: { path: fileURLToPath(new URL('i18n/', import.meta.url)), watch: false },
  resolvers: [AcceptLanguageResolver],
});
