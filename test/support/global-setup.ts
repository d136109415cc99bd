import { requireRedisServer } from './redis-server.js';

/** Stops the run at once, with an install hint, when redis-server is missing. */
export default function setup(): void {
  requireRedisServer();
}
