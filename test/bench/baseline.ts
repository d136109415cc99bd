// `--baseline=<git ref>`: the library as it was at another commit, built beside this one, so that
// the lock sections time and count both in the same run. A regression then shows as a ratio
// between two rows measured minutes apart on the same machine, not between two runs on
// different days (a shared VM's speed moves by tens of percent from one day to the next).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { RedisLockService } from '../../lib/index.js';

/** A build of the library at one commit. */
export interface Baseline {
  /** The ref as given, for the row's name. */
  readonly ref: string;
  /** Its commit, abbreviated. */
  readonly commit: string;
  /** The built `index.js`, for `import()`; the instructions worker gets it as an argument. */
  readonly entry: string;
}

/** The `RedisLockService` class a baseline exports, with this build's constructor type. */
export type BaselineService = typeof RedisLockService;

const git = (repoRoot: string, ...args: string[]): string =>
  execFileSync('git', args, { cwd: repoRoot, encoding: 'utf8' }).trim();

/**
 * Builds lib/ as it is at `ref` into `.build/baseline/<commit>/` (inside the repository, so that
 * its imports resolve to this checkout's node_modules) with this checkout's TypeScript, once per
 * commit.
 *
 * @example
 * ```ts
 * const baseline = buildBaseline(repoRoot, 'v1.0.0');
 * const Service = await loadBaseline(baseline.entry);
 * ```
 */
export function buildBaseline(repoRoot: string, ref: string): Baseline {
  const commit = git(repoRoot, 'rev-parse', '--short', `${ref}^{commit}`);
  const dir = join(repoRoot, '.build', 'baseline', commit);
  const entry = join(dir, 'dist', 'index.js');
  if (!existsSync(entry)) {
    rmSync(dir, { recursive: true, force: true });
    const src = join(dir, 'src');
    mkdirSync(src, { recursive: true });
    // lib/ and the tsconfig it extends, as committed; nothing of the working tree.
    const archive = execFileSync('git', ['archive', commit, 'lib', 'tsconfig.json'], {
      cwd: repoRoot,
      maxBuffer: 64 * 1024 * 1024,
    });
    execFileSync('tar', ['-x', '-C', src], { input: archive });
    execFileSync(
      process.execPath,
      [
        join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'),
        '-p',
        join(src, 'lib', 'tsconfig.build.json'),
        '--outDir',
        join(dir, 'dist'),
        '--sourceMap',
        'false',
        '--inlineSources',
        'false',
      ],
      { cwd: src, stdio: ['ignore', 'inherit', 'inherit'] },
    );
  }
  return { ref, commit, entry };
}

/**
 * The baseline's `RedisLockService`.
 *
 * @example
 * ```ts
 * const Service = await loadBaseline(baseline);
 * const lock = new Service({ redis: client, namespace: 'bench:baseline:' });
 * ```
 */
export async function loadBaseline(entry: string): Promise<BaselineService> {
  const module = (await import(pathToFileURL(entry).href)) as { RedisLockService?: unknown };
  if (typeof module.RedisLockService !== 'function') {
    throw new Error(`${entry} exports no RedisLockService`);
  }
  return module.RedisLockService as BaselineService;
}

/** The name of a baseline's row in the lock tables. */
export const baselineRowName = (ref: string): string => `RedisLockService at ${ref}`;
