// The `nestjs-buffer-lock/opentelemetry` entry: only its users load @opentelemetry/api.
// test/opentelemetry/index.spec.ts pins it.
export { enableBufferLockTelemetry, type BufferLockTelemetryOptions } from './telemetry.js';
export { BufferLockTelemetryModule } from './telemetry.module.js';
export {
  CHANNEL_NAMES,
  type BreakerMessage,
  type CacheTrace,
  type FlightTrace,
  type LockLostMessage,
  type LockTrace,
  type TraceOutcome,
} from '../telemetry/channels.js';
