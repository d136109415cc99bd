// The `nestjs-buffer-lock/terminus` entry: for apps that use @nestjs/terminus. The root entry
// never imports it. test/terminus/index.spec.ts pins these names.
export {
  BufferLockHealthIndicator,
  type BufferLockHealthDetails,
  type BufferLockHealthOptions,
} from './buffer-lock.health.js';
export type { SubscriberState } from '../single-flight/single-flight.engine.js';
