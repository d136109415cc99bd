import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from '../support/built-package.js';

const pages = ['README.md', ...readdirSync(join(root, 'docs')).map((name) => `docs/${name}`)];
const text = (page: string) => readFileSync(join(root, page), 'utf8');

// GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens.
const slug = (heading: string) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replaceAll(' ', '-');

const anchorsOf = (page: string) =>
  new Set([...text(page).matchAll(/^#+ (.+)$/gm)].map((m) => slug(m[1]!)));

describe('the links of README.md and docs/', () => {
  it('lead to a file of this repository and, with an anchor, to one of its headings', () => {
    const broken: string[] = [];
    for (const page of pages) {
      for (const [, target = ''] of text(page).matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target)) continue; // https:, mailto:
        const [path = '', anchor] = target.split('#');
        const file = path === '' ? page : normalize(join(dirname(page), path));
        if (!existsSync(join(root, file))) broken.push(`${page}: ${target}`);
        else if (anchor && file.endsWith('.md') && !anchorsOf(file).has(anchor)) {
          broken.push(`${page}: ${target}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});
