import type { ConfigValue, ConfigViolation } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { ENGLISH_MESSAGES, type MessageId } from '../messages/messages.catalog.js';

/** A broken rule: the catalog's text for `code`, then the values it read. */
export function configViolation(
  messages: BufferLockMessages,
  property: string,
  code: MessageId,
  values: readonly ConfigValue[],
  params?: Readonly<Record<string, string>>,
): ConfigViolation {
  return {
    property,
    code,
    message: withValues(messages, messages.render(code, params), values),
    values,
  };
}

/** `text`, then `values` in the catalog's words: each as given, as its default, or not given. */
export function withValues(
  messages: BufferLockMessages,
  text: string,
  values: readonly ConfigValue[],
): string {
  if (values.length === 0) return text;
  const shown = values.map(({ name, value, isDefault }) => {
    const id = !isDefault
      ? 'option_value'
      : value === 'undefined'
        ? 'option_not_given'
        : 'option_value_default';
    const words = id === 'option_not_given' ? ['NAME'] : ['NAME', 'VALUE'];
    return fill(templateWith(messages, id, words), { NAME: name, VALUE: value });
  });
  const template = templateWith(messages, 'option_values', ['TEXT', 'VALUES']);
  return fill(template, { TEXT: text, VALUES: shown.join('; ') });
}

/** `id`'s template, or its English one where a translation lost one of `words`: nothing is dropped. */
function templateWith(
  messages: BufferLockMessages,
  id: MessageId,
  words: readonly string[],
): string {
  const template = messages.template(id);
  const kept = words.every((word) => new RegExp(`\\b${word}\\b`).test(template));
  return kept ? template : ENGLISH_MESSAGES[id];
}

// One pass over the template, as render() does, without its cut: the rule's text stays whole.
const fill = (template: string, parts: Readonly<Record<string, string>>): string =>
  template.replace(/\b[A-Z]+\b/g, (word) => (Object.hasOwn(parts, word) ? parts[word]! : word));
