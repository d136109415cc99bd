import { spawn } from 'node:child_process';
import { ensureBuilt, root } from './built-package.js';

/**
 * Runs an ES module `script` in a node of its own with `--expose-gc`, against the built package
 * (`dist/`, built when older than lib/), and resolves the JSON it prints last. The script has
 * `heap()`: the heap used after a full GC, in bytes; `flags` go to node too. A heap of its own: the test runner's
 * allocations do not blur the figure.
 */
export async function inHeapChild<T>(
  script: string,
  env: Record<string, string> = {},
  flags: readonly string[] = [],
): Promise<T> {
  ensureBuilt();
  const prelude = `
const heap = () => { for (let i = 0; i < 4; i++) globalThis.gc(); return process.memoryUsage().heapUsed; };
`;
  const child = spawn(
    process.execPath,
    ['--expose-gc', ...flags, '--input-type=module', '-e', prelude + script],
    { cwd: root, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  let err = '';
  child.stdout.on('data', (chunk: Buffer) => (out += String(chunk)));
  child.stderr.on('data', (chunk: Buffer) => (err += String(chunk)));
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`child exited with ${String(code)}:\n${err}`);
  return JSON.parse(out.trim().split('\n').at(-1)!) as T;
}
