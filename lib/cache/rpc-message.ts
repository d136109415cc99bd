// What the cache reads of a message handler (`@MessagePattern`, `@EventPattern`): the metadata
// keys of @nestjs/microservices (an optional peer, never loaded here).
import type { Reflector } from '@nestjs/core';
import { fingerprintOf } from './call-digest.js';

const PATTERN_METADATA = 'microservices:pattern';
const PATTERN_HANDLER_METADATA = 'microservices:handler_type';
// `PatternHandler.EVENT`: a handler whose outcome nobody waits for.
const EVENT_HANDLER = 2;

/** The handler's patterns, as `@MessagePattern`/`@EventPattern` declared them. */
export const patternOf = (reflector: Reflector, handler: object): unknown =>
  reflector.get<unknown>(PATTERN_METADATA, handler as () => unknown);

/** Whether the handler takes events (`@EventPattern`): its outcome is never cached. */
export const isEventHandler = (reflector: Reflector, handler: object): boolean =>
  reflector.get<unknown>(PATTERN_HANDLER_METADATA, handler as () => unknown) === EVENT_HANDLER;

/** A message's key: its handler's patterns and its data, hashed. */
export const messageKeyOf = (pattern: unknown, data: unknown): string =>
  fingerprintOf('message', pattern, data);
