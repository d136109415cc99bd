import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { BufferLockModule } from '../lib/index.js';
import { SampleConfig, SampleConfigModule } from './config.js';
import { NightlyReportJob } from './nightly/nightly-report.job.js';
import { ReportBuilder } from './reports/report-builder.js';
import { ReportCache } from './reports/report-cache.js';
import { ReportsController } from './reports/reports.controller.js';

@Module({
  imports: [
    SampleConfigModule,
    ScheduleModule.forRoot(),
    BufferLockModule.forRootAsync({
      isGlobal: true,
      imports: [SampleConfigModule],
      inject: [SampleConfig],
      useFactory: (config: SampleConfig) => ({
        redis: config.redisUrl, // the module makes the client on first use, quits it at shutdown
        namespace: 'sample:lock:',
        ttl: Number(config.lockTtl), // numeric strings such as '60' would be accepted as well
        lockTimeout: Number(config.lockTimeout),
      }),
    }),
  ],
  controllers: [ReportsController],
  providers: [ReportCache, ReportBuilder, NightlyReportJob],
})
// oxlint-disable-next-line typescript/no-extraneous-class -- a Nest module is an empty class with metadata
export class AppModule {}
