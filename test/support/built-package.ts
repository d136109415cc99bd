import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

// Shared by the tests that use the package as it is published (dist/), not lib/ itself.

export const root = new URL('../..', import.meta.url).pathname;

/** Newest modification time of the files under `dir`, in ms. */
function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile())
      latest = Math.max(latest, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  }
  return latest;
}

/** Builds dist/ when it is missing or older than lib/ (CI builds it before the tests). */
export function ensureBuilt(): void {
  const entry = join(root, 'dist/index.js');
  if (existsSync(entry) && statSync(entry).mtimeMs >= newest(join(root, 'lib'))) return;
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const build = spawnSync(process.execPath, [tsc, '-p', 'lib/tsconfig.build.json'], {
    cwd: root,
    encoding: 'utf8',
  });
  if (build.status !== 0)
    throw new Error(`tsc -p lib/tsconfig.build.json failed:\n${build.stdout}`);
}
