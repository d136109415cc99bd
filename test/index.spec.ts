import { describe, expect, it } from 'vitest';
import * as api from '../lib/index.js';
import { ensureBuilt } from './support/built-package.js';
import { exportedNames } from './support/exported-names.js';
import { unexportedTypes } from './support/unexported-types.js';

const VALUES = [
  'BufferCache',
  'BufferCacheInterceptor',
  'Cached',
  'CacheEvict',
  'CachePut',
  'CacheTags',
  'BufferLockConfigError',
  'BufferLockMessages',
  'BufferLockModule',
  'BufferLockNotImportedError',
  'ENGLISH_MESSAGES',
  'Idempotent',
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
  'BufferLockDecorator',
  'BufferCacheEvents',
  'BufferCacheOptions',
  'BufferCacheStore',
  'BufferLockOptions',
  'BufferLockTypes',
  'CacheEvictKeys',
  'CacheTagList',
  'ExtendResult',
  'FlightLockLostEvent',
  'IdempotentOptions',
  'LockClient',
  'LockGuard',
  'MessageId',
  'RedisClientFactory',
  'RedisLockOptions',
  'RedisScriptClient',
  'ReleaseResult',
  'ResolvedBufferLockOptions',
  'ResultSerializer',
  'SecondsOption',
  'SecondsResolved',
  'SingleFlightKey',
  'SingleFlightEvents',
  'SingleFlightOptions',
  'Stored',
];

describe('the public API', () => {
  it('exports exactly these values at run time', () => {
    expect(Object.keys(api).toSorted()).toEqual(VALUES.toSorted());
  });

  it('exports exactly these names in all, types included: an addition is a deliberate choice', () => {
    expect(exportedNames(new URL('../lib/index.ts', import.meta.url)).toSorted()).toEqual(
      [...VALUES, ...TYPES].toSorted(),
    );
    expect(VALUES.length + TYPES.length).toBeLessThanOrEqual(47);
  });

  it('its published types name only what an entry point exports: every type a user meets can be imported', () => {
    ensureBuilt();
    const entries = [
      'dist/index.d.ts',
      'dist/terminus/index.d.ts',
      'dist/opentelemetry/index.d.ts',
    ];
    expect(unexportedTypes(entries)).toEqual({});
  });
});
