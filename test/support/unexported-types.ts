import { join, relative, sep } from 'node:path';
import ts from 'typescript';
import { root } from './built-package.js';

/**
 * The names that the published declarations of `entries` (paths under dist/) use in their public
 * declarations but that no entry point exports (the root's names count for every entry), each
 * with the exported names whose declarations use it: what a user would meet and could not import.
 * Private members are left out, and so is a class's own base (`declare const X_base` beside it).
 */
export function unexportedTypes(entries: readonly string[]): Record<string, string[]> {
  const files = entries.map((entry) => join(root, entry));
  const program = ts.createProgram(files, {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    skipLibCheck: true,
  });
  const checker = program.getTypeChecker();
  const dist = join(root, 'dist') + sep;
  const resolve = (symbol: ts.Symbol): ts.Symbol =>
    symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
  const exportsOf = (file: string): ts.Symbol[] =>
    checker.getExportsOfModule(checker.getSymbolAtLocation(program.getSourceFile(file)!)!);
  const importable = new Set(files.flatMap((file) => exportsOf(file).map(resolve)));
  const found: Record<string, Set<string>> = {};

  const visit = (node: ts.Node, user: string): void => {
    if (ts.isClassElement(node) && node.name && ts.isPrivateIdentifier(node.name)) return;
    if (
      (ts.isPropertyDeclaration(node) || ts.isMethodDeclaration(node)) &&
      ts.getCombinedModifierFlags(node) & ts.ModifierFlags.Private
    ) {
      return;
    }
    const name = ts.isTypeReferenceNode(node)
      ? node.typeName
      : ts.isTypeQueryNode(node)
        ? node.exprName
        : ts.isExpressionWithTypeArguments(node)
          ? node.expression
          : undefined;
    const symbol = name && checker.getSymbolAtLocation(name);
    const declaration = symbol && resolve(symbol).declarations?.[0];
    if (
      symbol &&
      declaration &&
      declaration.getSourceFile().fileName.startsWith(dist) &&
      !(resolve(symbol).flags & ts.SymbolFlags.TypeParameter) &&
      !(
        ts.isVariableDeclaration(declaration) &&
        declaration.getSourceFile() === node.getSourceFile()
      ) &&
      !importable.has(resolve(symbol))
    ) {
      const where = relative(dist, declaration.getSourceFile().fileName);
      (found[`${resolve(symbol).name} (${where})`] ??= new Set()).add(user);
    }
    ts.forEachChild(node, (child) => visit(child, user));
  };

  for (const file of files) {
    for (const exported of exportsOf(file).map(resolve)) {
      for (const declaration of exported.declarations ?? []) {
        if (declaration.getSourceFile().fileName.startsWith(dist))
          visit(declaration, exported.name);
      }
    }
  }
  return Object.fromEntries(Object.entries(found).map(([name, users]) => [name, [...users]]));
}
