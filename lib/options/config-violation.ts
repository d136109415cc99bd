import type { ConfigValue, ConfigViolation } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';

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
    return messages.render(id, { NAME: name, VALUE: value });
  });
  // One pass over the template, as render() does, without its cut: the rule's text stays whole.
  const parts: Record<string, string> = { TEXT: text, VALUES: shown.join('; ') };
  return messages.template('option_values').replace(/\b(TEXT|VALUES)\b/g, (w) => parts[w]!);
}
