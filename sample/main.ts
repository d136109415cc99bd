import 'reflect-metadata';
import { Logger, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { pathToFileURL } from 'node:url';
import { AppModule } from './app.module.js';
import { redactUrl, SampleConfig } from './config.js';

/** Starts the sample app on `port` (default: PORT, else 3000). */
export async function bootstrap(port?: number): Promise<INestApplication> {
  const app = await NestFactory.create(AppModule, {
    logger: process.env.QUIET ? ['error', 'warn'] : undefined,
  });
  app.enableShutdownHooks();
  const config = app.get(SampleConfig);
  await app.listen(port ?? config.port, '127.0.0.1');
  new Logger('Sample').log(
    `listening on ${await app.getUrl()}, Redis at ${redactUrl(config.redisUrl)}`,
  );
  return app;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await bootstrap();
}
