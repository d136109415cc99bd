import { ValidateIf } from 'class-validator';
import { isTags } from './cache.options.js';
import { given } from './rules.js';
import { Rule } from './validate-options.js';

// The rules of `@CacheEvict`'s options.
export class CacheEvictOptionsDto {
  @ValidateIf(given)
  @Rule('cache_tags_invalid', (v) => isTags(v) || typeof v === 'function')
  tags?: unknown = undefined;
}
