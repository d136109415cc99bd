/**
 * Whether `client` says it is connected now: ioredis's (and iovalkey's) `status` is `'ready'`. A
 * client that keeps no `status`, or whose getter throws, says nothing, and reads as not connected.
 *
 * @example
 * ```ts
 * if (isConnected(client)) await sendKeptReleases();
 * ```
 */
export function isConnected(client: unknown): boolean {
  try {
    return (client as { status?: unknown } | null | undefined)?.status === 'ready';
  } catch {
    return false;
  }
}
