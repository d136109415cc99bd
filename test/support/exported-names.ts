import ts from 'typescript';

/**
 * Every name the entry file `file` (a `URL` or path under lib/) exports, values and types alike, as
 * the compiler sees them.
 */
export function exportedNames(file: URL): string[] {
  const program = ts.createProgram([file.pathname], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    experimentalDecorators: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(file.pathname)!)!;
  return checker.getExportsOfModule(module).map((symbol) => symbol.name);
}
