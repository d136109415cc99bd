/**
 * A reply the lock cannot read: not what its command answers (a pipeline that answered no
 * `[error, reply]` pair for a command, a script that answered a string). The lock service turns it
 * into a `LockError` with the catalog's `redis_bad_reply` text; it never leaves the service.
 *
 * @example
 * ```ts
 * if (!Array.isArray(result)) pending.reject(new BadReply());
 * ```
 */
export class BadReply extends Error {
  constructor() {
    super('unexpected reply');
  }
}
