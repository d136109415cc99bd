import fc from 'fast-check';
import {
  BufferLockConfigError,
  BufferLockNotImportedError,
  ENGLISH_MESSAGES,
  LockBusyError,
  LockError,
  RedisUnavailableError,
} from '../../lib/index.js';

/**
 * What every property of the fuzz suite shares: a replayable seed, the catalog-error check, a
 * per-call deadline, and the hostile values the public API must take without a crash.
 */

const MESSAGE_IDS = new Set<string>(Object.keys(ENGLISH_MESSAGES));

const envNumber = (name: string): number | undefined => {
  const text = process.env[name];
  return text === undefined || text === '' ? undefined : Number(text);
};

/**
 * `fc.assert` parameters for `file`: `numRuns` (or `FUZZ_RUNS`), and `FUZZ_SEED` / `FUZZ_PATH`
 * from the environment to replay a failure; `defaultSeed` fixes the runs of a property whose
 * coverage is checked afterwards. A failure's message ends with the command that replays it.
 */
export function fuzzParameters<T>(
  file: string,
  numRuns: number,
  defaultSeed?: number,
): fc.Parameters<T> {
  const seed = envNumber('FUZZ_SEED') ?? defaultSeed;
  const path = process.env.FUZZ_PATH || undefined;
  return {
    numRuns: envNumber('FUZZ_RUNS') ?? numRuns,
    ...(seed === undefined ? {} : { seed }),
    ...(path === undefined ? {} : { path }),
    reporter(details) {
      if (!details.failed) return;
      const replay =
        `FUZZ_SEED=${details.seed}` +
        (details.counterexamplePath ? ` FUZZ_PATH='${details.counterexamplePath}'` : '') +
        ` npm test -- ${file}`;
      const text = fc.defaultReportMessage(details) ?? 'Property failed';
      const error = new Error(`${text}\n\nReplay it with: ${replay}\n`);
      if (details.errorInstance instanceof Error) error.cause = details.errorInstance;
      throw error;
    },
  };
}

/** Whether `code` is a message id of the catalog. */
export const isMessageId = (code: unknown): boolean =>
  typeof code === 'string' && MESSAGE_IDS.has(code);

/**
 * Why `error` is not an error of the library's catalog, or `undefined` when it is one: a
 * `LockError`, `BufferLockConfigError` (each violation too), `RedisUnavailableError` (its cause
 * too), `LockBusyError` or `BufferLockNotImportedError` whose `code` is a message id.
 */
export function notCatalogError(error: unknown): string | undefined {
  const known =
    error instanceof LockError ||
    error instanceof BufferLockConfigError ||
    error instanceof RedisUnavailableError ||
    error instanceof LockBusyError ||
    error instanceof BufferLockNotImportedError;
  if (!known) return `not a catalog error: ${describeValue(error)}`;
  if (!isMessageId(error.code)) return `code ${String(error.code)} is no message id`;
  if (error instanceof BufferLockConfigError) {
    const bad = error.violations.find((v) => !isMessageId(v.code));
    if (error.violations.length === 0 || bad) return `violation ${String(bad?.code)} unknown`;
  }
  if (error instanceof RedisUnavailableError) {
    if (!(error.cause instanceof LockError) || !isMessageId(error.cause.code)) {
      return `its cause is no catalog LockError: ${describeValue(error.cause)}`;
    }
  }
  return undefined;
}

/** Why a `[value, error]` tuple of the lock is not one, or `undefined` when it is. */
export function notTuple(result: unknown): string | undefined {
  if (!Array.isArray(result) || result.length !== 2) return `no tuple: ${describeValue(result)}`;
  const [, error] = result as [unknown, unknown];
  return error === undefined ? undefined : notCatalogError(error);
}

/** A value in words, for a failure message; never throws. */
export function describeValue(value: unknown): string {
  try {
    if (value instanceof Error) return `${value.name}: ${value.message}`;
    return typeof value === 'symbol' ? value.toString() : String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** How a call ended within its deadline, or that it did not. */
export type Outcome =
  | { readonly settled: true; readonly ok: true; readonly value: unknown }
  | { readonly settled: true; readonly ok: false; readonly error: unknown }
  | { readonly settled: false };

/**
 * Runs `call` (which may also throw synchronously) and races it against `ms` of real time.
 * A synchronous throw counts as an error outcome.
 */
export async function within(ms: number, call: () => unknown): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<Outcome>((resolve) => {
    timer = setTimeout(() => resolve({ settled: false }), ms);
  });
  let promise: Promise<unknown>;
  try {
    promise = Promise.resolve(call());
  } catch (error) {
    clearTimeout(timer);
    return { settled: true, ok: false, error };
  }
  const outcome = promise.then(
    (value): Outcome => ({ settled: true, ok: true, value }),
    (error: unknown): Outcome => ({ settled: true, ok: false, error }),
  );
  return Promise.race([outcome, late]).finally(() => clearTimeout(timer));
}

/** Lets callbacks queued by the last call (immediates, a short timer) run. */
export const drain = (ms = 5): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Options: a value and whether its rule takes it

/** An option's value and whether its documented rule takes it. */
export interface Field {
  readonly value: unknown;
  readonly valid: boolean;
}

export const field = (
  valid: fc.Arbitrary<unknown>,
  invalid: fc.Arbitrary<unknown>,
): fc.Arbitrary<Field> =>
  fc.oneof(
    { weight: 3, arbitrary: valid.map((value) => ({ value, valid: true })) },
    { weight: 1, arbitrary: invalid.map((value) => ({ value, valid: false })) },
  );

const MAX_SECONDS = Math.floor(Number.MAX_SAFE_INTEGER / 1000);

/** The documented rule for seconds: a positive decimal number, or a string that spells one. */
export const isSeconds = (v: unknown): boolean =>
  ((typeof v === 'number' && Number.isFinite(v)) || typeof v === 'string') &&
  /^\d+(?:\.\d+)?$/.test(String(v)) &&
  Number(v) > 0 &&
  Number(v) <= MAX_SECONDS;

// ---------------------------------------------------------------------------------------------
// Hostile values

/** A Proxy trap that throws for a string key and does what `fallback` does for a symbol. */
const trap = <F extends (...args: never[]) => unknown>(name: string, fallback: F): F =>
  ((...args: unknown[]): unknown => {
    if (typeof args[1] === 'symbol')
      return (fallback as unknown as (...a: unknown[]) => unknown)(...args);
    throw new Error(`${name} trap`);
  }) as unknown as F;

/**
 * A Proxy whose every trap throws for string keys. Symbol keys pass through, so that fast-check
 * (which looks for its own symbols on generated values) can still handle it.
 */
export const throwingProxy = (): object =>
  new Proxy(
    {},
    {
      get: trap('get', Reflect.get),
      has: trap('has', Reflect.has),
      getOwnPropertyDescriptor: trap('getOwnPropertyDescriptor', Reflect.getOwnPropertyDescriptor),
      ownKeys: () => {
        throw new Error('ownKeys trap');
      },
      getPrototypeOf: () => {
        throw new Error('getPrototypeOf trap');
      },
    },
  );

/** An object with one enumerable getter, `name`, that throws. */
export const throwingGetter = (name: string): object =>
  Object.defineProperty({}, name, {
    enumerable: true,
    get: () => {
      throw new Error(`getter ${name}`);
    },
  });

/** An object whose `valueOf` and `toString` throw. */
export const throwingValueOf = (): object => ({
  valueOf(): never {
    throw new Error('valueOf');
  },
  toString(): never {
    throw new Error('toString');
  },
});

/** A thenable whose `then` throws. */
export const throwingThenable = (): object => ({
  // oxlint-disable-next-line unicorn/no-thenable -- a hostile thenable is what is tested
  then(): never {
    throw new Error('then');
  },
});

/** Values of every type, hostile objects among them. */
export const anyValue: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(undefined),
  fc.constant(null),
  fc.boolean(),
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -0, 1, -1, Number.NaN, Infinity, -Infinity, 2 ** 53, 1e21),
  fc.bigInt(),
  fc.string(),
  fc.constantFrom('', '0', '1', '30', '0.5', '1e3', ' 1', 'OK', 'redis://', 'NOSCRIPT'),
  fc.string().map((s) => Symbol(s)),
  fc.constant(Object.create(null) as object),
  fc.array(fc.oneof(fc.integer(), fc.string(), fc.constant(null)), { maxLength: 3 }),
  fc.constant(() => undefined),
  fc.constant(() => {
    throw new Error('a function that throws');
  }),
  fc.constant(null).map(throwingValueOf),
  fc.constant(null).map(throwingProxy),
  fc.constant(null).map(throwingThenable),
  fc.string().map(throwingGetter),
  fc.constant(null).map(() => Object.freeze({})),
  fc.constant(new Date(0)),
);

/**
 * Cache keys: any string, lone surrogates and the empty string included, a huge one (1 MB), and
 * values that are not strings at all.
 */
export const anyKey: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: 'binary' }) },
  {
    weight: 3,
    arbitrary: fc.string({
      unit: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '',
      '\uD800',
      '\uDBFF',
      '\uDC00',
      '\uFFFD',
      'a\uD800b',
      '🔑',
      '{tag}k',
    ),
  },
  { weight: 1, arbitrary: fc.constant('x'.repeat(1024 * 1024)) },
  { weight: 1, arbitrary: fc.constant('\uD83D'.repeat(512 * 1024)) },
  { weight: 2, arbitrary: anyValue },
);

/** The characters a key may use to forge or break a log line. */
export const LOG_BREAKERS = [
  '\n',
  '\r',
  '\t',
  '\u001b',
  '\u2028',
  '\u2029',
  '\0',
  '\u0007',
  '\u0085',
];

/**
 * Keys that try to forge log lines: text with line breaks, ESC, U+2028/2029, NUL and other
 * control characters among it, and huge keys (up to 1 MB) of text or of control characters.
 */
export const logForgingKey: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc
      .array(
        fc.oneof(fc.constantFrom(...LOG_BREAKERS), fc.string({ minLength: 1, maxLength: 12 })),
        {
          minLength: 1,
          maxLength: 16,
        },
      )
      .map((parts) => parts.join('')),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        fc.constantFrom('x', '\n', '\u001b[31m', '\u2028', '\0', 'a\r\n[Nest] 1 LOG forged '),
        fc.integer({ min: 201, max: 1024 * 1024 }),
      )
      .map(([fill, length]) => fill.repeat(Math.ceil(length / fill.length)).slice(0, length)),
  },
);
