import {
  getMetadataStorage,
  ValidateBy,
  ValidateNested,
  validateSync,
  type ValidationError,
} from 'class-validator';
import {
  BufferLockConfigError,
  type ConfigValue,
  type ConfigViolation,
} from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import { attempt } from '../messages/error-text.js';
import { configViolation } from './config-violation.js';
import { isPlainObject } from './rules.js';
import { shownValue } from './shown-value.js';
import { parseSeconds, TIMER_SECONDS } from './seconds.js';

// Per options class: the properties read as seconds, and those holding nested options.
interface Field {
  readonly seconds?: (value: unknown) => number | undefined;
  readonly nested?: new () => object;
}
const fields = new WeakMap<object, Map<string, Field>>();
// What a resolver returned: whoever is handed one does not validate it again.
const resolvedObjects = new WeakSet<object>();

const declare = (target: object, property: string | symbol, field: Field): void => {
  if (!fields.has(target)) fields.set(target, new Map());
  fields.get(target)!.set(String(property), field);
};

const names = new WeakMap<object, ReadonlySet<string>>();

/** The options `Dto` declares, its base classes' too: each field with a default or a rule. */
export function optionNames(Dto: new () => object): ReadonlySet<string> {
  let known = names.get(Dto);
  if (!known) {
    const rules = getMetadataStorage().getTargetValidationMetadatas(Dto, '', true, false);
    known = new Set([...Object.keys(new Dto()), ...rules.map((rule) => rule.propertyName)]);
    names.set(Dto, known);
  }
  return known;
}

function fieldsOf(object: object): [string, Field][] {
  const found: [string, Field][] = [];
  for (let proto = Object.getPrototypeOf(object); proto; proto = Object.getPrototypeOf(proto)) {
    found.push(...(fields.get(proto) ?? []));
  }
  return found;
}

// The other options a rule reads besides its own, by its message id: its error shows them too.
const alsoReads = new Map<MessageId, readonly string[]>();

/**
 * A rule refused with `messageId` (the constraint's message): one rule, one catalog text. `reads`:
 * the other options its test reads.
 */
export function Rule(
  messageId: MessageId,
  test: (value: unknown, options: Record<string, unknown>) => boolean,
  reads: readonly string[] = [],
): PropertyDecorator {
  if (reads.length > 0) alsoReads.set(messageId, reads);
  return ValidateBy(
    {
      name: messageId,
      validator: {
        // A value whose getter or Proxy trap throws while the rule reads it is refused, not thrown.
        validate: (value, args) =>
          attempt(() => test(value, (args?.object ?? {}) as Record<string, unknown>), false),
      },
    },
    { message: messageId },
  );
}

/**
 * Seconds as `parseSeconds` reads them (with `orZero`, 0 too; `max` at most); resolved to the
 * number.
 */
export function Seconds(
  messageId: MessageId,
  {
    orZero = false,
    timed = false,
    max: most,
  }: { orZero?: boolean; timed?: boolean; max?: number } = {},
): PropertyDecorator {
  const max = timed ? TIMER_SECONDS : most;
  const read = (value: unknown): number | undefined =>
    orZero && (value === 0 || value === '0') ? 0 : parseSeconds(value, max);
  const rule = Rule(messageId, (value) => read(value) !== undefined);
  return (target, property) => {
    declare(target, property, { seconds: read });
    rule(target, property);
  };
}

/** Options of their own class: a plain object is read as a `Dto` (its defaults fill the rest). */
export function Nested(Dto: new () => object, messageId: MessageId): PropertyDecorator {
  const shape = Rule(messageId, (value) => value instanceof Dto);
  const nested = ValidateNested({ message: messageId });
  return (target, property) => {
    declare(target, property, { nested: Dto });
    shape(target, property);
    nested(target, property);
  };
}

// Stands for an option that could not be read: no rule takes a symbol, so it is reported.
const UNREADABLE: unique symbol = Symbol('unreadable option');

/**
 * The own enumerable options of `input`, each read once; a throwing one is `UNREADABLE`, one
 * that is `undefined` is left out (not given).
 */
export function readableCopy(input: unknown): Record<string, unknown> {
  if (typeof input !== 'object' || input === null) return {};
  const read = (key: string): unknown => {
    const value = (input as Record<string, unknown>)[key];
    // class-validator asks `instanceof`, which a hostile Proxy throws on.
    void (value instanceof Object);
    return value;
  };
  const copy: Record<string, unknown> = {};
  // Assigned, not defined: a `__proto__` key must not reach the options object as its own.
  for (const key of attempt(() => Object.keys(input), [])) {
    const value = attempt(() => read(key), UNREADABLE);
    if (value !== undefined) copy[key] = value;
  }
  return copy;
}

/** An option's value as its error shows it: `isDefault` when the app left it out. */
function valueOf(target: object, name: string, path: string, given: object): ConfigValue {
  const value = (target as Record<string, unknown>)[name];
  const shown = value === UNREADABLE ? '[unreadable]' : shownValue(value);
  return { name: path, value: shown, isDefault: !Object.hasOwn(given, name) };
}

/** Every broken rule, once per property and message id; nested ones under their parent's name. */
function violationsOf(
  errors: readonly ValidationError[],
  messages: BufferLockMessages,
  given: object,
  parent?: string,
): ConfigViolation[] {
  return errors.flatMap((error): ConfigViolation[] => {
    const property = parent ?? error.property;
    const path = parent ? `${parent}.${error.property}` : error.property;
    const target = error.target ?? {};
    // Inside a nested object, what the app gave is that object's own options.
    const own = parent ? target : given;
    const broken = Object.values(error.constraints ?? {}).map((id) => {
      const read = [error.property, ...(alsoReads.get(id as MessageId) ?? [])];
      const values = read.map((name) =>
        valueOf(target, name, parent ? `${parent}.${name}` : name, own),
      );
      return configViolation(messages, property, id as MessageId, values);
    });
    const children = error.children ?? [];
    return [...broken, ...violationsOf(children, messages, given, path)];
  });
}

function readSeconds(dto: object): void {
  const record = dto as Record<string, unknown>;
  for (const [property, { seconds, nested }] of fieldsOf(dto)) {
    const value = record[property];
    if (seconds && value !== undefined) record[property] = seconds(value);
    if (nested && typeof value === 'object' && value !== null) readSeconds(value);
  }
}

/** A violation for each name in `given` that is not in `known`, under `parent` if nested. */
function unknownOf(
  given: object,
  known: ReadonlySet<string>,
  messages: BufferLockMessages,
  parent?: string,
): ConfigViolation[] {
  return Object.keys(given)
    .filter((name) => !known.has(name))
    .map((name) =>
      configViolation(messages, parent ?? name, 'option_unknown', [], {
        NAME: parent ? `${parent}.${name}` : name,
      }),
    );
}

/**
 * Resolves `input` (seconds as numbers) or throws one error listing every violation, a name
 * not in `known` among them. `'complete'`: options not given (or `undefined`) take their
 * defaults; `'partial'`: only the options given.
 */
export function validateOptions<T extends object>(
  Dto: new () => T,
  input: unknown,
  messages: BufferLockMessages,
  mode: 'complete' | 'partial' = 'complete',
  known: ReadonlySet<string> = optionNames(Dto),
): T {
  const defaults = new Dto();
  const given = readableCopy(input);
  const unknown = unknownOf(given, known, messages);
  const dto: T = Object.assign(
    mode === 'complete' ? new Dto() : (Object.create(Dto.prototype) as T),
    given,
  );
  const record = dto as Record<string, unknown>;
  for (const [property, { nested }] of fieldsOf(dto)) {
    const value = record[property];
    if (!nested || !isPlainObject(value)) continue;
    const own = readableCopy(value);
    unknown.push(...unknownOf(own, optionNames(nested), messages, property));
    record[property] = Object.assign(new nested(), own);
  }
  const errors = validateSync(dto, {
    forbidUnknownValues: false,
    skipUndefinedProperties: mode === 'partial',
  });
  // In declaration order, base classes first; fields without a default (redis) lead.
  const order = Object.keys(defaults);
  const seen = new Set<string>();
  const violations = [...violationsOf(errors, messages, given), ...unknown]
    .filter(
      (v) => !seen.has(`${v.property}\n${v.message}`) && seen.add(`${v.property}\n${v.message}`),
    )
    .toSorted((a, b) => order.indexOf(a.property) - order.indexOf(b.property));
  if (violations.length > 0) throw new BufferLockConfigError(violations);
  readSeconds(dto);
  if (mode === 'complete') {
    for (const [property, value] of Object.entries(defaults)) {
      if (record[property] === undefined) record[property] = value;
    }
  }
  return markResolved(dto);
}

export function isResolved(options: unknown): boolean {
  return typeof options === 'object' && options !== null && resolvedObjects.has(options);
}

/** Marks a copy of resolved options (frozen, say) as resolved too. */
export function markResolved<T extends object>(options: T): T {
  resolvedObjects.add(options);
  return options;
}
