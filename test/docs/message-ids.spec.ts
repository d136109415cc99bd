import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ENGLISH_MESSAGES } from '../../lib/index.js';

const root = new URL('../..', import.meta.url);
const pages = ['README.md', ...readdirSync(new URL('docs', root)).map((name) => `docs/${name}`)];
const text = (page: string) => readFileSync(new URL(page, root), 'utf8');
const ids = new Set(Object.keys(ENGLISH_MESSAGES));

/** The snake_case words in backticks: what the docs show as message ids. */
const named = (page: string) =>
  [...text(page).matchAll(/`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`/g)].map((m) => m[1]!);

describe('the message ids in README.md and docs/', () => {
  it('are ids of the catalog, each one a code the library emits', () => {
    const unknown = pages.flatMap((page) =>
      named(page)
        .filter((word) => word !== 'cache_lock' && !ids.has(word))
        .map((word) => `${page}: ${word}`),
    );
    expect(unknown).toEqual([]);
  });

  it('are all listed, with their English texts, on the messages page', () => {
    const rows = new Map(
      [...text('docs/messages.md').matchAll(/^\| `([a-z0-9_]+)` +\| (.*?) +\|$/gm)].map((m) => [
        m[1]!,
        m[2]!.replaceAll('\\|', '|'),
      ]),
    );
    expect(Object.fromEntries(rows)).toEqual(ENGLISH_MESSAGES);
  });
});
