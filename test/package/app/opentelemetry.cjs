'use strict';
// A CommonJS app that loads the packed `nestjs-buffer-lock/opentelemetry` entry and turns one
// flight against the Redis at REDIS_URL into a span. The SDK is no peer of the package, so the
// tracer provider is a small one of the API's shape that records what it is given. Prints one
// JSON line with what it saw; exits 1 on any failure.
require('reflect-metadata');
const diagnostics = require('node:diagnostics_channel');
const { Redis } = require('ioredis');
const { RedisLockService, SingleFlightEngine } = require('nestjs-buffer-lock');
const telemetry = require('nestjs-buffer-lock/opentelemetry');

const url = process.env.REDIS_URL;
const spans = [];
const tracerProvider = {
  getTracer: () => ({
    startSpan(name) {
      const span = { name, attributes: {} };
      spans.push(span);
      return {
        setAttributes: (attributes) => Object.assign(span.attributes, attributes),
        setStatus() {},
        recordException() {},
        end: () => (span.ended = true),
      };
    },
  }),
};

async function main() {
  const client = new Redis(url);
  const lock = new RedisLockService({ redis: () => client, namespace: 'cjs-otel:' });
  const engine = new SingleFlightEngine({ lock });
  const stop = telemetry.enableBufferLockTelemetry({ tracerProvider });
  const value = await engine.run('nightly-report', () => 'built');
  stop();
  await engine.run('nightly-report', () => 'again');
  engine.close();
  await client.quit();
  console.log(
    JSON.stringify({
      resolved: require.resolve('nestjs-buffer-lock/opentelemetry'),
      exports: Object.keys(telemetry).toSorted(),
      value,
      spans,
      subscribedAfterStop: diagnostics.tracingChannel(telemetry.CHANNEL_NAMES.flight)
        .hasSubscribers,
    }),
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1); // open clients would keep a failed run alive
});
