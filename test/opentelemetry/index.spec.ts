import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import * as api from '../../lib/opentelemetry/index.js';

/** Every name a file exports, values and types alike, as the compiler sees them. */
function exportedNames(path: string): string[] {
  const file = new URL(path, import.meta.url).pathname;
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

/** The packages `entry` loads, through every module of lib/ it imports (types left out). */
function packagesLoadedBy(entry: string): Set<string> {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2023);
    for (const statement of source.statements) {
      if (!ts.isImportDeclaration(statement) && !ts.isExportDeclaration(statement)) continue;
      if (ts.isImportDeclaration(statement) && statement.importClause?.isTypeOnly) continue;
      if (ts.isExportDeclaration(statement) && statement.isTypeOnly) continue;
      const specifier = statement.moduleSpecifier;
      if (!specifier || !ts.isStringLiteral(specifier)) continue;
      if (specifier.text.startsWith('.')) {
        visit(resolve(dirname(file), specifier.text.replace(/\.js$/, '.ts')));
      } else {
        packages.add(specifier.text);
      }
    }
  };
  visit(new URL(entry, import.meta.url).pathname);
  return packages;
}

const VALUES = ['BufferLockTelemetryModule', 'CHANNEL_NAMES', 'enableBufferLockTelemetry'];
const TYPES = [
  'BreakerMessage',
  'BufferLockTelemetryOptions',
  'CacheTrace',
  'FlightTrace',
  'LockLostMessage',
  'LockTrace',
  'TraceOutcome',
];

describe('nestjs-buffer-lock/opentelemetry', () => {
  it('exports exactly these values at run time', () => {
    expect(Object.keys(api).toSorted()).toEqual(VALUES.toSorted());
  });

  it('exports exactly these names in all, types included', () => {
    expect(exportedNames('../../lib/opentelemetry/index.ts').toSorted()).toEqual(
      [...VALUES, ...TYPES].toSorted(),
    );
  });

  it('names the channels users subscribe to', () => {
    expect(api.CHANNEL_NAMES).toEqual({
      flight: 'nestjs-buffer-lock:flight',
      lock: 'nestjs-buffer-lock:lock',
      cache: 'nestjs-buffer-lock:cache',
      lockLost: 'nestjs-buffer-lock:lock-lost',
      breaker: 'nestjs-buffer-lock:breaker',
    });
  });

  it('is the only entry that loads @opentelemetry/api: the root entry never does', () => {
    const root = [...packagesLoadedBy('../../lib/index.ts')];
    expect(root.filter((name) => name.startsWith('@opentelemetry/'))).toEqual([]);
    expect(packagesLoadedBy('../../lib/opentelemetry/index.ts')).toContain('@opentelemetry/api');
    // No module outside lib/opentelemetry/ loads it either.
    const lib = new URL('../../lib', import.meta.url).pathname;
    const others = readdirSync(lib, { recursive: true, encoding: 'utf8' }).filter(
      (file) => file.endsWith('.ts') && !file.startsWith('opentelemetry'),
    );
    for (const file of others) {
      expect(readFileSync(join(lib, file), 'utf8'), file).not.toMatch(/['"]@opentelemetry\//);
    }
  });
});
