import { readFileSync } from 'node:fs';

/**
 * Whether `doc` (relative to the repository) shows the module at `recipe` (beside the spec that
 * runs it) word for word as a `ts` block, importing the package by its name.
 */
export function docShowsRecipe(recipe: URL, doc: string): boolean {
  const code = readFileSync(recipe, 'utf8').replace("'../../lib/index.js'", "'nestjs-buffer-lock'");
  const page = readFileSync(new URL(`../../${doc}`, import.meta.url), 'utf8');
  return page.includes('```ts\n' + code + '```\n');
}
