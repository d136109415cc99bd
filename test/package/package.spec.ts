import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { readFileSync } from 'node:fs';
import { symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, posix } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as api from '../../lib/index.js';
import * as terminus from '../../lib/terminus/index.js';
import { ensureBuilt, root } from '../support/built-package.js';
import { startRedis, type RedisServer } from '../support/redis-server.js';

/**
 * The package as npm would publish it: `npm pack` of the built dist/, the tarball's file list,
 * and a CommonJS app that installs the tarball (extracted into its node_modules, with the peer
 * dependencies linked from this repository's node_modules: no network) and uses it against a
 * real Redis.
 */

const manifest = createRequire(import.meta.url)('../../package.json') as {
  name: string;
  version: string;
  peerDependencies: Record<string, string>;
};

interface PackedFile {
  path: string;
}
interface PackResult {
  filename: string;
  files: PackedFile[];
}

let workDir: string;
let packed: PackResult;
let appDir: string;
/** The same app without the optional peers @nestjs/terminus and @opentelemetry/api installed. */
let bareDir: string;
/** The same app without ioredis (nor iovalkey, its fork): node-redis is its client. */
let noIoredisDir: string;
let server: RedisServer;

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, { cwd, encoding: 'utf8' });
  if (result.error) throw result.error;
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} exited with ${result.status}:\n${result.stderr}`);
  }
  return result.stdout;
}

/**
 * A CommonJS app with the tarball extracted into node_modules and the peers linked, except those
 * in `without`.
 */
function installApp(tarball: string, name = 'app', without: readonly string[] = []): string {
  const app = join(workDir, name);
  const target = join(app, 'node_modules', manifest.name);
  mkdirSync(target, { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'cjs-app', private: true }));
  run('tar', ['-xzf', tarball, '-C', target, '--strip-components=1'], workDir);
  for (const peer of Object.keys(manifest.peerDependencies)) {
    if (without.includes(peer)) continue;
    const source = join(root, 'node_modules', peer);
    if (!existsSync(source)) throw new Error(`peer dependency ${peer} is not installed`);
    const link = join(app, 'node_modules', peer);
    mkdirSync(dirname(link), { recursive: true });
    symlinkSync(source, link, 'dir');
  }
  for (const script of ['main.cjs', 'without-ioredis.cjs', 'opentelemetry.cjs']) {
    copyFileSync(join(root, 'test/package/app', script), join(app, script));
  }
  return app;
}

beforeAll(async () => {
  ensureBuilt();
  workDir = mkdtempSync(join(tmpdir(), 'buffer-lock-pack-'));
  const out = run(
    'npm',
    ['pack', '--json', '--ignore-scripts', '--pack-destination', workDir],
    root,
  );
  [packed] = JSON.parse(out) as PackResult[];
  appDir = installApp(join(workDir, packed.filename));
  bareDir = installApp(join(workDir, packed.filename), 'bare-app', [
    '@nestjs/terminus',
    '@opentelemetry/api',
  ]);
  noIoredisDir = installApp(join(workDir, packed.filename), 'no-ioredis-app', [
    'ioredis',
    'iovalkey',
  ]);
  server = await startRedis();
}, 120_000);

afterAll(async () => {
  await server?.stop();
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

describe('the packed tarball', () => {
  it('holds dist/ (JavaScript and declarations), README.md, docs/, LICENSE, CHANGELOG.md and package.json', () => {
    const files = packed.files.map((file) => file.path);
    expect(files).toEqual(
      expect.arrayContaining([
        'package.json',
        'README.md',
        'LICENSE',
        'CHANGELOG.md',
        'docs/cache.md',
        'dist/index.js',
        'dist/index.d.ts',
        'dist/opentelemetry/index.js',
        'dist/opentelemetry/index.d.ts',
      ]),
    );
    const scripts = files.filter((file) => file.startsWith('dist/') && file.endsWith('.js'));
    expect(scripts.length).toBeGreaterThan(10);
    // Every module has its declarations next to it.
    for (const script of scripts) expect(files).toContain(script.replace(/\.js$/, '.d.ts'));
  });

  it('holds docs/: every relative link of README.md and of docs/ resolves to a packed file', () => {
    const files = packed.files.map((file) => file.path);
    const pages = files.filter((file) => file === 'README.md' || /^docs\/[\w-]+\.md$/.test(file));
    expect(pages.length).toBeGreaterThan(10);
    // The commands of a checkout (`npm run sample`, `npm run bench`) link to what they run there.
    const checkoutOnly = new Set(['sample/', 'test/bench/RESULTS.md']);
    const dead: string[] = [];
    for (const page of pages) {
      const text = readFileSync(join(root, page), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        const path = posix.normalize(posix.join(posix.dirname(page), target!));
        if (checkoutOnly.has(path)) continue;
        if (!files.includes(path)) dead.push(`${page} → ${target!}`);
      }
    }
    expect(dead).toEqual([]);
  });

  it('holds nothing else: no tests, sample, CI script, benchmarks or .build output', () => {
    const files = packed.files.map((file) => file.path);
    const extra = files.filter(
      (file) =>
        !file.startsWith('dist/') &&
        !/^docs\/[\w-]+\.md$/.test(file) &&
        !['package.json', 'README.md', 'LICENSE', 'CHANGELOG.md'].includes(file),
    );
    expect(extra).toEqual([]);
    expect(files.filter((file) => /(^|\/)(test|sample|\.ci|\.build)\/|bench/.test(file))).toEqual(
      [],
    );
  });

  it('holds the nestjs-buffer-lock/terminus entry: its JavaScript and declarations', () => {
    const files = packed.files.map((file) => file.path);
    expect(files).toEqual(
      expect.arrayContaining(['dist/terminus/index.js', 'dist/terminus/index.d.ts']),
    );
  });

  it('extracts to exactly the files npm listed', () => {
    const target = join(appDir, 'node_modules', manifest.name);
    const extracted = readdirSync(target, { recursive: true, withFileTypes: true })
      .filter((entry) => entry.isFile())
      .map((entry) => join(entry.parentPath, entry.name).slice(target.length + 1));
    expect(extracted.toSorted()).toEqual(packed.files.map((file) => file.path).toSorted());
  });
});

/**
 * Runs `script` in the app at `dir` against the test Redis; it must exit cleanly and print nothing
 * but its JSON, which is returned.
 */
function runApp<T>(dir: string, script: string): T {
  // require(esm) is on by default in every Node the engines field allows (20.19+, 22.12+); the
  // flag is only added on an older Node, for a clear failure rather than ERR_REQUIRE_ESM.
  const flags = process.features.require_module ? [] : ['--experimental-require-module'];
  const result = spawnSync(process.execPath, [...flags, script], {
    cwd: dir,
    env: { ...process.env, REDIS_URL: server.url, NODE_OPTIONS: '' },
    encoding: 'utf8',
    timeout: 20_000,
  });
  expect(result.stderr, 'the app failed or warned').toBe('');
  expect(result.status).toBe(0);
  return JSON.parse(result.stdout.trim()) as T;
}

/** What main.cjs printed: it runs once, for the tests below. */
interface Seen {
  node: string;
  requireModule: boolean;
  resolved: string;
  version: string;
  exports: string[];
  terminusResolved: string;
  terminusExports: string[];
  health: Record<string, unknown>;
  keysLeft: number;
}
let appRun: Promise<Seen> | undefined;

function runMain(): Promise<Seen> {
  appRun ??= (async () => runApp<Seen>(appDir, 'main.cjs'))();
  return appRun;
}

describe('a CommonJS app that installs the tarball', () => {
  it("require('nestjs-buffer-lock') loads the ES module without a flag and RedisLockService locks through Redis", async () => {
    const seen = await runMain();
    expect(seen.node).toBe(process.version);
    expect(seen.requireModule).toBe(true);
    expect(seen.resolved).toBe(join(appDir, 'node_modules', manifest.name, 'dist/index.js'));
    expect(seen.version).toBe(manifest.version);
    expect(seen.exports).toEqual(Object.keys(api).toSorted());
    expect(seen.keysLeft).toBe(0);
  });

  it("require('nestjs-buffer-lock/terminus') loads, and its health indicator reports Redis up", async () => {
    const seen = await runMain();
    expect(seen.terminusResolved).toBe(
      join(appDir, 'node_modules', manifest.name, 'dist/terminus/index.js'),
    );
    expect(seen.terminusExports).toEqual(Object.keys(terminus).toSorted());
    expect(seen.health).toEqual({
      status: 'up',
      breaker: 'closed',
      pingMs: expect.any(Number),
      subscriber: 'usable',
    });
  });
});

describe('an app without the optional peers @nestjs/terminus and @opentelemetry/api', () => {
  const script = `
    const library = require('nestjs-buffer-lock');
    let terminus;
    try {
      require('nestjs-buffer-lock/terminus');
      terminus = 'loaded';
    } catch (error) {
      terminus = error.code + ' ' + error.message.includes('@nestjs/terminus');
    }
    let opentelemetry;
    try {
      require('nestjs-buffer-lock/opentelemetry');
      opentelemetry = 'loaded';
    } catch (error) {
      opentelemetry = error.code + ' ' + error.message.includes('@opentelemetry/api');
    }
    console.log(JSON.stringify({ exports: Object.keys(library).length, terminus, opentelemetry }));
  `;

  it('loads the root entry; only the terminus and opentelemetry entries need their peers', () => {
    const result = spawnSync(process.execPath, ['-e', script], {
      cwd: bareDir,
      env: { ...process.env, NODE_OPTIONS: '' },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(result.stderr).toBe('');
    expect(JSON.parse(result.stdout.trim())).toEqual({
      exports: Object.keys(api).length,
      terminus: 'ERR_MODULE_NOT_FOUND true',
      opentelemetry: 'ERR_MODULE_NOT_FOUND true',
    });
  });
});

describe('a CommonJS app that installs the tarball without ioredis', () => {
  it('loads the library, locks through a node-redis client, an eval()-only client and memory:// (logging its start-up line), and a client by URL fails with redis_client_missing', () => {
    const missing = api.ENGLISH_MESSAGES.redis_client_missing;
    expect(runApp(noIoredisDir, 'without-ioredis.cjs')).toEqual({
      ioredisFound: false,
      nodeRedis: true,
      scripts: true,
      memory: true,
      logged: [api.ENGLISH_MESSAGES.memory_backend],
      missing: { code: 'redis_client_missing', message: `Redis lock failed: ${missing}` },
      direct: { code: 'redis_client_missing', message: missing },
      keysLeft: 0,
    });
  });
});

describe('a CommonJS app that loads nestjs-buffer-lock/opentelemetry', () => {
  it('resolves the subpath to dist/opentelemetry/ and turns a flight into a span until stopped', () => {
    const seen = runApp<{
      resolved: string;
      exports: string[];
      value: string;
      spans: { name: string; attributes: Record<string, unknown>; ended?: boolean }[];
      subscribedAfterStop: boolean;
    }>(appDir, 'opentelemetry.cjs');
    expect(seen.resolved).toBe(
      join(appDir, 'node_modules', manifest.name, 'dist/opentelemetry/index.js'),
    );
    expect(seen.exports).toEqual([
      'BufferLockTelemetryModule',
      'CHANNEL_NAMES',
      'enableBufferLockTelemetry',
    ]);
    expect(seen.value).toBe('built');
    // One span: the flight before stop(); none for the one after.
    expect(seen.spans).toEqual([
      {
        name: 'buffer_lock.flight',
        ended: true,
        attributes: expect.objectContaining({
          'buffer_lock.role': 'leader',
          'buffer_lock.locked': true,
          'buffer_lock.outcome': 'ok',
        }),
      },
    ]);
    expect(JSON.stringify(seen.spans)).not.toContain('nightly-report');
    expect(seen.subscribedAfterStop).toBe(false);
  });
});

/** The one fenced block of `lang` in the section of `page` under `heading` (the page's first if none). */
function fenced(page: string, lang: string, heading?: string): string {
  let text = readFileSync(join(root, page), 'utf8');
  if (heading) text = text.slice(text.indexOf(heading));
  const match = new RegExp('```' + lang + '\\n([\\s\\S]*?)```\\n').exec(text);
  if (!match) throw new Error(`no ${lang} block in ${page}`);
  return match[1]!;
}

describe("a TypeScript project that installs the tarball, with docs/typescript.md's options", () => {
  it('compiles the README quick start and a module passing an ioredis client, skipLibCheck off', () => {
    const project = installApp(join(workDir, packed.filename), 'ts-app');
    const tsconfig = fenced('docs/typescript.md', 'json');
    expect(JSON.parse(tsconfig).compilerOptions.skipLibCheck).toBe(false);
    writeFileSync(join(project, 'tsconfig.json'), tsconfig);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ type: 'module', private: true }));
    // As in any Nest app: Node's own types.
    mkdirSync(join(project, 'node_modules/@types'), { recursive: true });
    symlinkSync(join(root, 'node_modules/@types/node'), join(project, 'node_modules/@types/node'));
    mkdirSync(join(project, 'src'));
    writeFileSync(join(project, 'src/main.ts'), fenced('README.md', 'ts', '## Quick start'));
    writeFileSync(
      join(project, 'src/client.ts'),
      [
        "import { Module } from '@nestjs/common';",
        "import { Redis } from 'ioredis';",
        "import { BufferLockModule } from 'nestjs-buffer-lock';",
        '',
        '@Module({',
        "  imports: [BufferLockModule.forRoot({ redis: () => new Redis(process.env.REDIS_URL ?? '') })],",
        '})',
        'export class ClientModule {}',
        '',
      ].join('\n'),
    );
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    const result = spawnSync(process.execPath, [tsc, '-p', project], { encoding: 'utf8' });
    expect(result.stdout + result.stderr).toBe('');
    expect(result.status).toBe(0);
    expect(readdirSync(join(project, 'dist')).toSorted()).toEqual(['client.js', 'main.js']);
  });
});
