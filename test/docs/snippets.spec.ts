import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureBuilt, root } from '../support/built-package.js';

interface Snippet {
  /** Where the block starts, as `docs/cache.md:42` (the line of its opening fence). */
  readonly place: string;
  readonly file: string;
  readonly line: number;
  readonly code: string;
  /** Its module's name in the temporary project. */
  readonly module: string;
}

const pages = ['README.md', ...readdirSync(join(root, 'docs')).map((name) => `docs/${name}`)]
  .filter((page) => page.endsWith('.md'))
  .toSorted();

const FENCE = /^(\s*)```(\S*)\s*$/;

function blocksOf(page: string): { line: number; language: string; code: string }[] {
  const lines = readFileSync(join(root, page), 'utf8').split('\n');
  const blocks: { line: number; language: string; code: string }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]!);
    if (!open) continue;
    const [, indent = '', language = ''] = open;
    const start = i;
    const body: string[] = [];
    while (++i < lines.length && !/^\s*```\s*$/.test(lines[i]!)) {
      body.push(lines[i]!.slice(indent.length));
    }
    blocks.push({ line: start + 1, language, code: body.join('\n') + '\n' });
  }
  return blocks;
}

const blocks = pages.flatMap((page) => blocksOf(page).map((block) => ({ page, ...block })));
const snippets: Snippet[] = blocks
  .filter((block) => block.language === 'ts' || block.language === 'typescript')
  .map((block) => ({
    place: `${block.page}:${block.line}`,
    file: block.page,
    line: block.line,
    code: block.code,
    // A first line `// name.ts` names the module, for the snippets that import it.
    module:
      /^\/\/ ([\w.-]+\.ts)\n/.exec(block.code)?.[1] ??
      `${block.page.replace(/\W+/g, '-')}-${block.line}.ts`,
  }));

const compilerOptions = {
  target: 'ES2023',
  lib: ['ES2023'],
  module: 'nodenext',
  moduleResolution: 'nodenext',
  types: ['node'],
  strict: true,
  noImplicitOverride: true,
  noUnusedLocals: true,
  noUnusedParameters: true,
  experimentalDecorators: true,
  emitDecoratorMetadata: true,
  useDefineForClassFields: false,
  esModuleInterop: true,
  skipLibCheck: true,
  noEmit: true,
};

/**
 * The HTTP platforms a snippet must compile on: each program's node_modules lacks the other
 * platform's packages, so a snippet that leans on one platform's types fails on the other.
 */
const PLATFORMS = {
  Express: ['@nestjs/platform-fastify', 'fastify', '@fastify', 'fastify-plugin'],
  Fastify: ['@nestjs/platform-express', 'express'],
} as const;
type PlatformName = keyof typeof PLATFORMS;

const workDirs: string[] = [];
/** tsc's diagnostics, by platform and snippet module (`Express:readme-12.ts`). */
const errors = new Map<string, string[]>();
const OUTSIDE = '(outside the snippets)';
/** The snippet modules tsc read, by platform. */
const checked = new Set<string>();

/**
 * A snippet that augments the package's types (`declare module 'nestjs-buffer-lock'`) changes
 * them for its whole program, as it would in an app: it compiles in a program of its own.
 */
const augments = (snippet: Snippet): boolean =>
  snippet.code.includes("declare module 'nestjs-buffer-lock'");
const programs: Snippet[][] = [
  snippets.filter((snippet) => !augments(snippet)),
  ...snippets.filter(augments).map((snippet) => [snippet]),
];

/**
 * A project whose node_modules has the package (a link to this repository, so its `exports`
 * and dist/ types) beside links to every package of this repository's node_modules.
 */
function makeProject(group: readonly Snippet[], platform: PlatformName): string {
  const dir = mkdtempSync(join(tmpdir(), 'buffer-lock-snippets-'));
  workDirs.push(dir);
  const modules = join(dir, 'node_modules');
  mkdirSync(join(dir, 'snippets'), { recursive: true });
  mkdirSync(modules);
  symlinkSync(root, join(modules, 'nestjs-buffer-lock'), 'dir');
  const left: readonly string[] = PLATFORMS[platform];
  for (const name of readdirSync(join(root, 'node_modules'))) {
    if (name.startsWith('.') || left.includes(name)) continue;
    if (!name.startsWith('@')) {
      symlinkSync(join(root, 'node_modules', name), join(modules, name), 'dir');
      continue;
    }
    mkdirSync(join(modules, name));
    for (const scoped of readdirSync(join(root, 'node_modules', name))) {
      if (left.includes(`${name}/${scoped}`)) continue;
      symlinkSync(join(root, 'node_modules', name, scoped), join(modules, name, scoped), 'dir');
    }
  }
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify({ compilerOptions, include: ['snippets/*.ts'] }, null, 2),
  );
  for (const snippet of group) writeFileSync(join(dir, 'snippets', snippet.module), snippet.code);
  return dir;
}

/** Compiles `group` in a project of its own, noting what tsc read and said, by snippet. */
function compile(group: readonly Snippet[], platform: PlatformName): void {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  const args = [tsc, '-p', 'tsconfig.json', '--pretty', 'false', '--listFiles'];
  const result = spawnSync(process.execPath, args, {
    cwd: makeProject(group, platform),
    encoding: 'utf8',
  });
  if (result.error) throw result.error;
  for (const line of result.stdout.split('\n')) {
    const listed = /\/snippets\/([^/]+\.ts)$/.exec(line);
    if (listed) {
      checked.add(`${platform}:${listed[1]!}`);
      continue;
    }
    if (line.startsWith('/')) continue; // another file tsc read
    const found = /^snippets\/([^(]+)\((\d+),(\d+)\): (.*)$/.exec(line);
    if (!found) {
      if (line.trim())
        errors.set(OUTSIDE, [...(errors.get(OUTSIDE) ?? []), `${platform}: ${line}`]);
      continue;
    }
    const [, module = '', row = '0', column, text] = found;
    const snippet = group.find((s) => s.module === module);
    const where = snippet ? `${snippet.file}:${snippet.line + Number(row)}:${column}` : module;
    const key = `${platform}:${module}`;
    errors.set(key, [...(errors.get(key) ?? []), `${where} ${text}`]);
  }
}

beforeAll(() => {
  ensureBuilt();
  for (const platform of Object.keys(PLATFORMS) as PlatformName[]) {
    for (const group of programs) compile(group, platform);
  }
}, 300_000);

afterAll(() => {
  for (const dir of workDirs) rmSync(dir, { recursive: true, force: true });
});

describe('the TypeScript snippets of README.md and docs/', () => {
  it('are found on every page that shows code', () => {
    expect(snippets.length).toBeGreaterThan(20);
    expect(new Set(snippets.map((s) => s.file))).toContain('README.md');
  });

  it('name the language of every fenced block (ts, sh or text)', () => {
    const unnamed = blocks.filter(
      (block) => !['ts', 'sh', 'text', 'json'].includes(block.language),
    );
    expect(unnamed.map((block) => `${block.page}:${block.line} '${block.language}'`)).toEqual([]);
  });

  it('leave tsc nothing to say outside the snippets', () => {
    expect(errors.get(OUTSIDE) ?? []).toEqual([]);
  });

  it.each(snippets.map((snippet) => [snippet.place, snippet] as const))(
    '%s compiles against the built package, with Express alone and with Fastify alone',
    (_place, snippet) => {
      for (const platform of Object.keys(PLATFORMS)) {
        expect(checked).toContain(`${platform}:${snippet.module}`);
        expect(errors.get(`${platform}:${snippet.module}`) ?? []).toEqual([]);
      }
    },
  );
});
