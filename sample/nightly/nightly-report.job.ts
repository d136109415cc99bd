import { Injectable, Logger } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { setTimeout as sleep } from 'node:timers/promises';
import { SingleFlight } from '../../lib/index.js';

/**
 * Every worker on every machine schedules this job; the lock lets exactly one of them run it.
 * Not a cache, so @SingleFlight rather than @Cached: the others skip (resolve undefined).
 */
@Injectable()
export class NightlyReportJob {
  private readonly logger = new Logger(NightlyReportJob.name);

  // onRedisError 'throw': with Redis down no machine runs it, rather than all of them.
  @Cron('0 3 * * *')
  @SingleFlight('nightly-report', { onBusy: 'skip', onRedisError: 'throw' })
  async run(): Promise<'ran' | undefined> {
    this.logger.log('building the nightly report');
    await sleep(100); // the lock is extended while this runs
    return 'ran';
  }
}
