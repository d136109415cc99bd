import { SetMetadata, type CustomDecorator, type ExecutionContext } from '@nestjs/common';
import { CACHE_TAGS_METADATA } from '../cache/buffer-cache.interceptor.js';
import { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { isTags } from '../options/cache.options.js';
import { configError } from './method-metadata.js';

/**
 * The tags of the entries `BufferCacheInterceptor` stores for a route (on a handler, or on a
 * controller for all of its routes): `BufferCache.deleteByTag` makes them misses. An array of
 * tags, or a function of the request's `ExecutionContext` returning one (or a promise of one).
 *
 * @example
 * ```ts
 * @Get(':shop/menu')
 * @CacheTags((context) => [`shop:${context.switchToHttp().getRequest().params.shop}`])
 * menu(@Param('shop') shop: string): Promise<Menu> {
 *   return this.menus.of(shop);
 * }
 * ```
 */
export function CacheTags(
  tags:
    | readonly string[]
    | ((context: ExecutionContext) => readonly string[] | Promise<readonly string[]>),
): CustomDecorator<string> {
  if (typeof tags !== 'function' && !isTags(tags)) {
    throw configError(new BufferLockMessages(), 'tags', 'cache_tags_invalid', undefined, tags);
  }
  return SetMetadata(CACHE_TAGS_METADATA, tags);
}
