import type { BufferLockMessages } from '../messages/buffer-lock-messages.js';
import { errorText } from '../messages/error-text.js';
import type { FlightOptions } from '../options/buffer-lock.options.js';
import type { ThrottledLog } from '../single-flight/throttled-log.js';
import type { CacheEntry } from './entry-codec.js';
import type { InvalidationBus } from './invalidation-bus.js';
import type { LocalTier } from './local-tier.js';

/** Tells every `l1` of a write: the others drop their copy, this one may keep the new one. */
export class CopyAnnouncer {
  constructor(
    private readonly bus: InvalidationBus,
    private readonly tier: LocalTier<CacheEntry> | undefined,
    private readonly parts: {
      readonly options: FlightOptions;
      readonly messages: BufferLockMessages;
      readonly log: ThrottledLog;
      readonly now: () => number;
    },
  ) {}

  /**
   * With `l1`: this process's copy of `key` is dropped and the other workers are told to drop
   * theirs; `kept` is kept if the only thing heard since `before` is this announcement (another
   * worker's write of the key, heard meanwhile, may have come after this one in the store).
   */
  async announced(key: string, kept?: CacheEntry, before?: number): Promise<void> {
    const tier = this.tier;
    if (!tier) return;
    try {
      await this.bus.announceKey(key);
    } catch (error) {
      const { messages, log, options } = this.parts;
      const seconds = options.l1 ? options.l1.maxAge : 0;
      const line = messages.render('l1_publish_failed', {
        ERROR: errorText(error),
        SECONDS: seconds,
      });
      log.warn('l1_publish_failed', line);
      return;
    }
    if (kept && before !== undefined) tier.put(key, kept, before + 1, this.parts.now());
  }
}
