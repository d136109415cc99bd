import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import * as api from '../lib/index.js';

/** Every name lib/index.ts exports, values and types alike, as the compiler sees them. */
function exportedNames(): string[] {
  const file = new URL('../lib/index.ts', import.meta.url).pathname;
  const program = ts.createProgram([file], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    experimentalDecorators: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
  return checker.getExportsOfModule(module).map((symbol) => symbol.name);
}

const VALUES = [
  'BufferCache',
  'BufferCacheInterceptor',
  'Cached',
  'BufferLockConfigError',
  'BufferLockMessages',
  'BufferLockModule',
  'BufferLockNotImportedError',
  'ENGLISH_MESSAGES',
  'FAIL_FAST_CLIENT_DEFAULTS',
  'InjectBufferLockOptions',
  'LockBusyError',
  'LockError',
  'RedisLockService',
  'RedisUnavailableError',
  'SingleFlight',
  'SingleFlightEngine',
  'connectFailFast',
];

const TYPES = [
  'AcquireResult',
  'BufferCacheOptions',
  'BufferCacheStore',
  'BufferLockOptions',
  'ConfigViolation',
  'ExtendResult',
  'FlightLockLostEvent',
  'LockGuard',
  'MessageCatalog',
  'MessageId',
  'RedisClientFactory',
  'RedisLockOptions',
  'RedisScriptClient',
  'ReleaseResult',
  'ResolvedBufferLockOptions',
  'ResultSerializer',
  'SingleFlightKey',
  'SingleFlightOptions',
];

describe('the public API', () => {
  it('exports exactly these values at run time', () => {
    expect(Object.keys(api).toSorted()).toEqual(VALUES.toSorted());
  });

  it('exports exactly these names in all, types included: an addition is a deliberate choice', () => {
    expect(exportedNames().toSorted()).toEqual([...VALUES, ...TYPES].toSorted());
    expect(VALUES.length + TYPES.length).toBeLessThanOrEqual(35);
  });
});
