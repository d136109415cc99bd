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
  const url = await app.getUrl();
  new Logger('Sample').log(`listening on ${url}, Redis at ${redactUrl(config.redisUrl)}`);
  process.send?.({ listening: url }); // for a parent process that started it with PORT=0
  return app;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await bootstrap();
}
