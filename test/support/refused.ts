import { expect } from 'vitest';

/**
 * A refused option's message: the rule's `text` whole, then the values the rule read in
 * parentheses (test/options/values-shown.spec.ts pins how each value is shown).
 */
export function refusedWith(text: string): unknown {
  const escaped = text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return expect.stringMatching(new RegExp(`^${escaped} \\(.+\\)$`, 's'));
}
