import { Module } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { BufferLockModule, type SecondsOption } from '../../lib/index.js';

// REDIS_URL=redis://cache:6379  LOCK_TTL=30  LOCK_TIMEOUT=5  CACHE_TTL=120
@Module({
  imports: [
    ConfigModule.forRoot(),
    BufferLockModule.forRootAsync({
      isGlobal: true,
      imports: [ConfigModule],
      inject: [ConfigService],
      useFactory: (config: ConfigService) => ({
        redis: config.getOrThrow<string>('REDIS_URL'),
        // Environment values are strings: seconds take '30' as well as 30.
        ttl: config.get<SecondsOption>('LOCK_TTL', 60),
        lockTimeout: config.get<SecondsOption>('LOCK_TIMEOUT', 10),
        cacheDefaults: { ttl: config.get<SecondsOption>('CACHE_TTL', 60) },
      }),
    }),
  ],
})
export class AppModule {}
