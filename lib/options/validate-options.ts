import { ValidateBy, validateSync, type ValidationError } from 'class-validator';
import { BufferLockConfigError, type ConfigViolation } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';

/** The message id a validation decorator reports, kept in class-validator's `context`. */
interface MessageContext {
  messageId: MessageId;
}

/**
 * A class-validator property rule that reports `messageId` when `test` fails. Every rule of the
 * options DTOs is made with it, so each violation maps to exactly one catalog text.
 */
export function Rule(name: string, messageId: MessageId, test: (value: unknown) => boolean) {
  const context: MessageContext = { messageId };
  // class-validator maps `context` only onto constraints with a non-empty message.
  return ValidateBy(
    { name, validator: { validate: test, defaultMessage: () => messageId } },
    { context },
  );
}

function violationsOf(
  errors: readonly ValidationError[],
  messages: BufferLockMessages,
): ConfigViolation[] {
  return errors.flatMap((error) =>
    Object.keys(error.constraints ?? {}).map((rule) => {
      const { messageId } = (error.contexts ?? {})[rule] as MessageContext;
      return { property: error.property, code: messageId, message: messages.render(messageId) };
    }),
  );
}

/**
 * Validates `input` against a DTO class after filling in `defaults` for options that are absent.
 * An option present with the value `undefined` or `null` is validated, not defaulted, as the spec's
 * pitfalls ask. Throws one {@link BufferLockConfigError} listing every violation.
 */
export function validateOptions<T extends object>(
  Dto: new () => T,
  input: unknown,
  defaults: Partial<T>,
  messages: BufferLockMessages,
): T {
  const given = typeof input === 'object' && input !== null ? input : {};
  const dto = Object.assign(new Dto(), defaults, given);
  const violations = violationsOf(validateSync(dto, { forbidUnknownValues: false }), messages);
  if (violations.length > 0) throw new BufferLockConfigError(violations);
  return dto;
}
