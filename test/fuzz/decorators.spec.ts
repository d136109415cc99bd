import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  BufferLockConfigError,
  BufferLockNotImportedError,
  CachePut,
  Cached,
  SingleFlight,
} from '../../lib/index.js';
import { collectEscapes, settle } from '../support/escapes.js';
import {
  anyValue,
  field,
  fuzzParameters,
  isSeconds,
  notCatalogError,
  throwingGetter,
  throwingProxy,
  within,
  type Field,
} from './fuzz.js';

/**
 * `@SingleFlight` and `@Cached` with keys and options of every type: a decorator is made exactly
 * when the key is a key form and every option given keeps its rule; otherwise the class cannot be
 * defined, with one `BufferLockConfigError` naming what is wrong. A decorated method on an
 * instance Nest did not make fails with the catalog's not-imported error.
 */

const FILE = 'test/fuzz/decorators.spec.ts';
const escaped = collectEscapes();

/** Per-call options left `undefined` take the module's value: undefined is valid everywhere. */
const seconds = field(
  fc.oneof(fc.constant(undefined), fc.integer({ min: 1, max: 1000 }), fc.constantFrom('0.5', '30')),
  anyValue.filter((v) => v !== undefined && !isSeconds(v)),
);
const orZero = field(
  fc.oneof(fc.constant(undefined), fc.constantFrom(0, '0', 5, '0.25')),
  anyValue.filter((v) => v !== undefined && v !== 0 && v !== '0' && !isSeconds(v)),
);
const oneOf = (values: readonly unknown[]): fc.Arbitrary<Field> =>
  field(
    fc.constantFrom(undefined, ...values),
    anyValue.filter((v) => v !== undefined && !values.includes(v)),
  );

const key = field(
  fc.oneof(
    fc.string({ minLength: 1 }),
    fc.constant((id: unknown) => `k:${String(id)}`),
  ),
  fc.oneof(
    fc.constant(''),
    anyValue.filter((v) => typeof v !== 'function' && (typeof v !== 'string' || v === '')),
  ),
);

/** The options argument: left out, no object at all, or an object of fields. */
type OptionsArg =
  | { readonly kind: 'absent' }
  | { readonly kind: 'not-an-object'; readonly value: unknown }
  | { readonly kind: 'hostile'; readonly value: unknown }
  | { readonly kind: 'fields'; readonly fields: Readonly<Record<string, Field>> };

const optionsArg = (fields: fc.Arbitrary<Record<string, Field>>): fc.Arbitrary<OptionsArg> =>
  fc.oneof(
    fc.constant<OptionsArg>({ kind: 'absent' }),
    fc
      .oneof(
        anyValue.filter((v) => v !== undefined && (typeof v !== 'object' || v === null)),
        fc.constant([]),
      )
      .map((value): OptionsArg => ({ kind: 'not-an-object', value })),
    fc
      .oneof(
        fc.constantFrom('ttl', 'onBusy', 'grace').map(throwingGetter),
        fc.constant(null).map(throwingProxy),
      )
      .map((value): OptionsArg => ({ kind: 'hostile', value })),
    { weight: 4, arbitrary: fields.map((f): OptionsArg => ({ kind: 'fields', fields: f })) },
  );

const valueOf = (arg: OptionsArg): unknown => {
  if (arg.kind === 'absent') return undefined;
  if (arg.kind === 'fields') {
    return Object.fromEntries(Object.entries(arg.fields).map(([k, f]) => [k, f.value]));
  }
  return arg.value;
};

/** What a descriptor holds: a method, or something else that cannot be decorated. */
const descriptor = fc.oneof(
  { weight: 4, arbitrary: fc.constant<'method' | 'value' | 'getter'>('method') },
  { weight: 1, arbitrary: fc.constantFrom<'method' | 'value' | 'getter'>('value', 'getter') },
);

interface Expected {
  readonly code?: string;
  readonly properties?: Set<string>;
}

/** What decorating and calling must give: a config error (its code or properties) or none. */
async function check(
  make: () => (target: object, name: string, d: PropertyDescriptor) => void,
  holds: 'method' | 'value' | 'getter',
  expected: Expected | undefined,
  notMethodCode: string,
  lenient: boolean,
): Promise<void> {
  let decorate: ReturnType<typeof make>;
  try {
    decorate = make();
  } catch (error) {
    expect(notCatalogError(error)).toBeUndefined();
    expect(error).toBeInstanceOf(BufferLockConfigError);
    const config = error as BufferLockConfigError;
    if (expected?.code) expect(config.code).toBe(expected.code);
    if (expected?.properties) {
      expect(new Set(config.violations.map((v) => v.property))).toEqual(expected.properties);
    }
    if (!expected && !lenient) expect.fail(`refused valid arguments: ${config.message}`);
    return;
  }
  if (expected && !lenient) expect.fail('took arguments that break a rule');
  class Target {
    run(id: number): number {
      return id;
    }
  }
  const d: PropertyDescriptor =
    holds === 'method'
      ? { value: Target.prototype.run, writable: true, configurable: true }
      : holds === 'value'
        ? { value: 42, writable: true, configurable: true }
        : { get: () => 1, configurable: true };
  try {
    decorate(Target.prototype, 'run', d);
  } catch (error) {
    expect(notCatalogError(error)).toBeUndefined();
    expect((error as BufferLockConfigError).code).toBe(notMethodCode);
    expect(holds).not.toBe('method');
    return;
  }
  expect(holds).toBe('method');
  Object.defineProperty(Target.prototype, 'run', d);
  // Made with `new`, outside Nest: no engine or cache was injected.
  const outcome = await within(1000, () => new Target().run(1));
  expect(outcome).toMatchObject({ settled: true, ok: false });
  const error = (outcome as { error: unknown }).error;
  expect(notCatalogError(error)).toBeUndefined();
  expect(error).toBeInstanceOf(BufferLockNotImportedError);
}

/** The violations the options must give, or `undefined` when there are none. */
function expectedFor(
  keyField: Field,
  arg: OptionsArg,
  keyCode: string,
  optionsCode: string,
  crossCheck: (fields: Readonly<Record<string, Field>>) => string[],
): Expected | undefined {
  if (!keyField.valid) return { code: keyCode };
  if (arg.kind === 'not-an-object') return { code: optionsCode };
  if (arg.kind !== 'fields') return undefined;
  const broken = Object.entries(arg.fields)
    .filter(([, f]) => !f.valid)
    .map(([k]) => k);
  const properties = new Set([...broken, ...crossCheck(arg.fields)]);
  return properties.size ? { properties } : undefined;
}

// Both given and valid: the wait must stay shorter than the lock's life.
const waitBelowTtl = (f: Readonly<Record<string, Field>>): string[] => {
  const ttl = f.ttl?.valid ? f.ttl.value : undefined;
  const wait = f.lockTimeout?.valid ? f.lockTimeout.value : undefined;
  return ttl !== undefined && wait !== undefined && Number(wait) >= Number(ttl)
    ? ['lockTimeout']
    : [];
};

describe('decorators with keys and options of every type', () => {
  it('@SingleFlight is made exactly for a key form and valid per-call options', async () => {
    const fields = fc.record(
      {
        ttl: seconds,
        lockTimeout: seconds,
        maxHold: seconds,
        onBusy: oneOf(['wait', 'skip', 'throw']),
        onRedisError: oneOf(['proceed', 'throw']),
        share: oneOf([true, false]),
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(key, optionsArg(fields), descriptor, async (k, arg, holds) => {
        const expected = expectedFor(
          k,
          arg,
          'single_flight_key_invalid',
          'single_flight_options_invalid',
          waitBelowTtl,
        );
        await check(
          () => SingleFlight(k.value as string, valueOf(arg) as never) as never,
          holds,
          expected,
          'single_flight_not_method',
          arg.kind === 'hostile',
        );
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 300),
    );
    await settle();
    expect(escaped).toEqual([]);
  });

  it.each([
    ['@Cached', Cached, 'cached'],
    ['@CachePut', CachePut, 'cache_put'],
  ] as const)('%s is made exactly for a key form and valid cache options', async (_, make, id) => {
    const fields = fc.record(
      { ttl: seconds, grace: orZero, timeout: orZero, lockTtl: seconds, lockTimeout: seconds },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(key, optionsArg(fields), descriptor, async (k, arg, holds) => {
        const expected = expectedFor(
          k,
          arg,
          `${id}_key_invalid`,
          `${id}_options_invalid`,
          () => [],
        );
        await check(
          () => make(k.value as string, valueOf(arg) as never) as never,
          holds,
          expected,
          `${id}_not_method`,
          arg.kind === 'hostile',
        );
        expect(escaped).toEqual([]);
      }),
      fuzzParameters(FILE, 300),
    );
    await settle();
    expect(escaped).toEqual([]);
  });
});
