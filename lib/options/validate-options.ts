import { ValidateBy, ValidateNested, validateSync, type ValidationError } from 'class-validator';
import { BufferLockConfigError, type ConfigViolation } from '../errors/lock.error.js';
import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import type { MessageId } from '../messages/messages.catalog.js';
import { isPlainObject } from './rules.js';
import { parseSeconds } from './seconds.js';

/** Per options class: the properties read as seconds, and those holding nested options. */
const secondsFields = new WeakMap<object, Map<string, (value: unknown) => number | undefined>>();
const nestedFields = new WeakMap<object, Map<string, new () => object>>();

/** Objects that came out of a resolver: whoever is handed one does not validate it again. */
const resolvedObjects = new WeakSet<object>();

const register = <V>(table: WeakMap<object, V>, target: object, make: () => V): V => {
  let entry = table.get(target);
  if (!entry) table.set(target, (entry = make()));
  return entry;
};

/**
 * A class-validator rule that reports `messageId` when `test` fails. Each rule maps to exactly one
 * catalog text: the message id is the constraint's message.
 *
 * @example
 * ```ts
 * @Rule('share_invalid', (v) => typeof v === 'boolean')
 * share: boolean = false;
 * ```
 */
export function Rule(
  messageId: MessageId,
  test: (value: unknown, options: Record<string, unknown>) => boolean,
): PropertyDecorator {
  return ValidateBy(
    {
      name: messageId,
      validator: {
        // A value whose getter or Proxy trap throws while the rule reads it is refused, not thrown.
        validate: (value, args) => {
          try {
            return test(value, (args?.object ?? {}) as Record<string, unknown>);
          } catch {
            return false;
          }
        },
      },
    },
    { message: messageId },
  );
}

/**
 * A number of seconds: a positive decimal, or a string spelling one (as environment config
 * delivers it); with `orZero`, 0 too. The resolved options hold the number.
 *
 * @example
 * ```ts
 * @Seconds('cache_grace_invalid', { orZero: true })
 * grace: number = 0;
 * ```
 */
export function Seconds(messageId: MessageId, { orZero = false } = {}): PropertyDecorator {
  const read = (value: unknown): number | undefined =>
    orZero && (value === 0 || value === '0') ? 0 : parseSeconds(value);
  const rule = Rule(messageId, (value) => read(value) !== undefined);
  return (target, property) => {
    register(secondsFields, target, () => new Map()).set(String(property), read);
    rule(target, property);
  };
}

/**
 * Options of their own class inside the options: a plain object is read as an instance of `Dto`
 * (its defaults fill what it leaves out) and validated field by field; anything else is refused
 * with `messageId`.
 *
 * @example
 * ```ts
 * @Nested(CircuitBreakerOptionsDto, 'circuit_breaker_invalid')
 * circuitBreaker: CircuitBreakerSettings = new CircuitBreakerOptionsDto();
 * ```
 */
export function Nested(Dto: new () => object, messageId: MessageId): PropertyDecorator {
  const shape = Rule(messageId, (value) => value instanceof Dto);
  const nested = ValidateNested({ message: messageId });
  return (target, property) => {
    register(nestedFields, target, () => new Map()).set(String(property), Dto);
    shape(target, property);
    nested(target, property);
  };
}

/** The registered fields of `object`'s class and of every class it extends. */
function fieldsOf<V>(table: WeakMap<object, Iterable<V>>, object: object): V[] {
  const found: V[] = [];
  for (let proto = Object.getPrototypeOf(object); proto; proto = Object.getPrototypeOf(proto)) {
    found.push(...(table.get(proto) ?? []));
  }
  return found;
}

/** Whether class-validator can look at `value`: it asks `instanceof`, which a hostile Proxy throws on. */
const inspectable = (value: unknown): boolean => {
  try {
    void (value instanceof Object);
    return true;
  } catch {
    return false;
  }
};

/** Stands for an option that could not be read: no rule takes a symbol, so it is reported. */
const UNREADABLE: unique symbol = Symbol('unreadable option');

/**
 * The own enumerable options of `input`, each read once. One whose getter throws, or a Proxy
 * whose traps throw, is {@link UNREADABLE}; an object whose keys cannot be listed gives none.
 *
 * @example
 * ```ts
 * readableCopy({ ttl: 30, get boom() { throw new Error('no'); } });
 * // { ttl: 30, boom: UNREADABLE }
 * ```
 */
export function readableCopy(input: unknown): Record<string, unknown> {
  const copy: Record<string, unknown> = {};
  if (typeof input !== 'object' || input === null) return copy;
  let keys: string[];
  try {
    keys = Object.keys(input);
  } catch {
    return copy;
  }
  for (const key of keys) {
    try {
      const value = (input as Record<string, unknown>)[key];
      copy[key] = inspectable(value) ? value : UNREADABLE;
    } catch {
      copy[key] = UNREADABLE;
    }
  }
  return copy;
}

/** Every broken rule, once per property and message id; nested ones under their parent's name. */
function violationsOf(
  errors: readonly ValidationError[],
  messages: BufferLockMessages,
  parent?: string,
): ConfigViolation[] {
  const seen = new Set<string>();
  const all = errors.flatMap((error): ConfigViolation[] => {
    const property = parent ?? error.property;
    const own = Object.values(error.constraints ?? {}).map((id) => ({
      property,
      code: id as MessageId,
      message: messages.render(id as MessageId),
    }));
    return [...own, ...violationsOf(error.children ?? [], messages, property)];
  });
  return all.filter((v) => {
    const key = `${v.property}\n${v.code}`;
    return seen.has(key) ? false : (seen.add(key), true);
  });
}

/** Reads nested plain objects as their classes (with defaults), then seconds as numbers. */
function readNested(dto: object): void {
  for (const [property, Dto] of fieldsOf(nestedFields, dto)) {
    const value = (dto as Record<string, unknown>)[property];
    if (isPlainObject(value))
      (dto as Record<string, unknown>)[property] = Object.assign(new Dto(), readableCopy(value));
  }
}

function readSeconds(dto: object): void {
  const record = dto as Record<string, unknown>;
  for (const [property, read] of fieldsOf(secondsFields, dto)) {
    if (record[property] !== undefined) record[property] = read(record[property]);
  }
  for (const [property] of fieldsOf(nestedFields, dto)) {
    const value = record[property];
    if (typeof value === 'object' && value !== null) readSeconds(value);
  }
}

/** An option given as `undefined` where its rule accepts that means its default. */
function fillAcceptedUndefined(dto: object, defaults: object): void {
  const record = dto as Record<string, unknown>;
  for (const [property, value] of Object.entries(defaults)) {
    if (record[property] === undefined && value !== undefined) record[property] = value;
  }
}

/**
 * Validates `input` against an options class and resolves it.
 *
 * - `'complete'`: options absent from `input` take the class's defaults (its field initializers).
 *   An option present with the value `undefined` or `null` is validated, not defaulted.
 * - `'partial'`: only the options given are validated (per-call overrides); nothing is filled in.
 *
 * Seconds come out as numbers. Throws one {@link BufferLockConfigError} listing every violation.
 * The result is marked as resolved ({@link isResolved}).
 *
 * @example
 * ```ts
 * validateOptions(CircuitBreakerOptionsDto, { openSeconds: '2.5' }, messages);
 * // { failureThreshold: 5, openSeconds: 2.5, probes: 1 }
 * validateOptions(BufferLockOptionsDto, { ttl: '30' }, messages, 'partial'); // { ttl: 30 }
 * ```
 */
export function validateOptions<T extends object>(
  Dto: new () => T,
  input: unknown,
  messages: BufferLockMessages,
  mode: 'complete' | 'partial' = 'complete',
): T {
  const given = readableCopy(input);
  const dto: T =
    mode === 'complete'
      ? Object.assign(new Dto(), given)
      : Object.assign(Object.create(Dto.prototype) as T, given);
  readNested(dto);
  const errors = validateSync(dto, {
    forbidUnknownValues: false,
    skipUndefinedProperties: mode === 'partial',
  });
  // In declaration order, the lock's options first: fields without a default (redis) lead.
  const order = Object.keys(new Dto());
  const violations = violationsOf(errors, messages).toSorted(
    (a, b) => order.indexOf(a.property) - order.indexOf(b.property),
  );
  if (violations.length > 0) throw new BufferLockConfigError(violations);
  readSeconds(dto);
  if (mode === 'complete') fillAcceptedUndefined(dto, new Dto());
  resolvedObjects.add(dto);
  return dto;
}

/**
 * Whether `options` came out of {@link validateOptions} (or {@link markResolved}).
 *
 * @example
 * ```ts
 * const options = validateOptions(CircuitBreakerOptionsDto, {}, messages);
 * isResolved(options); // true
 * isResolved({ ...options }); // false: a copy is not
 * ```
 */
export function isResolved(options: unknown): boolean {
  return typeof options === 'object' && options !== null && resolvedObjects.has(options);
}

/**
 * Marks a copy of resolved options as resolved too (e.g. frozen, with `redis` made a factory).
 *
 * @example
 * ```ts
 * const frozen = markResolved(Object.freeze({ ...options }));
 * isResolved(frozen); // true
 * ```
 */
export function markResolved<T extends object>(options: T): T {
  resolvedObjects.add(options);
  return options;
}
