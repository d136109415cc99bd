import { spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from '../support/built-package.js';

/**
 * The types say what happens: each `*.types.ts` file of these folders is compiled under `strict`;
 * every `// @ts-expect-error` in it marks a use the types must refuse (one they accept fails the
 * compile, TS2578), every other line one they must accept. `keeps-types` is an app that declares
 * a serializer which keeps types, a program of its own.
 */
describe('the types', () => {
  it.each(['test/types', 'test/types/keeps-types'])(
    'accept what works and refuse what goes wrong at run time, in every *.types.ts of %s',
    (folder) => {
      const files = readdirSync(join(root, folder)).filter((f) => f.endsWith('.types.ts'));
      expect(files.length).toBeGreaterThan(0);
      const tsc = join(root, 'node_modules/typescript/bin/tsc');
      const result = spawnSync(process.execPath, [tsc, '-p', `${folder}/tsconfig.json`], {
        cwd: root,
        encoding: 'utf8',
      });
      expect(result.stdout + result.stderr).toBe('');
      expect(result.status).toBe(0);
    },
    120_000,
  );
});
