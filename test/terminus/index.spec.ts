import { describe, expect, it } from 'vitest';
import * as terminus from '../../lib/terminus/index.js';
import { exportedNames } from '../support/exported-names.js';

const VALUES = ['BufferLockHealthIndicator'];

const TYPES = ['BufferLockHealthDetails', 'BufferLockHealthOptions', 'SubscriberState'];

describe("the 'nestjs-buffer-lock/terminus' entry", () => {
  it('exports exactly these values at run time', () => {
    expect(Object.keys(terminus).toSorted()).toEqual(VALUES.toSorted());
  });

  it('exports exactly these names in all, types included', () => {
    const names = exportedNames(new URL('../../lib/terminus/index.ts', import.meta.url));
    expect(names.toSorted()).toEqual([...VALUES, ...TYPES].toSorted());
  });
});
