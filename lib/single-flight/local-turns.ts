/**
 * Turns, in one process, for the callers of one key: each caller waits for the one before it
 * (first come, first served) or until its deadline, whichever is first. The engine puts waiting
 * `@SingleFlight` callers through it, so that in one process only one of them at a time talks to
 * Redis about a key, instead of every waiter polling.
 *
 * @example
 * ```ts
 * const turns = new LocalTurns();
 * const passOn = await turns.take(redisKey, Date.now() + 10_000);
 * try { await work(); } finally { passOn(); }
 * ```
 */
export class LocalTurns {
  private readonly tails = new Map<string, Promise<void>>();

  /**
   * Resolves when it is this caller's turn (or at `deadline`, ms since the epoch) to a function
   * that lets the next caller go. Call it exactly once; further calls do nothing.
   */
  async take(key: string, deadline: number): Promise<() => void> {
    const previous = this.tails.get(key);
    let pass!: () => void;
    const mine = new Promise<void>((resolve) => (pass = resolve));
    // The next caller waits for this one and, if this one stopped waiting early, its predecessor.
    const tail = previous ? Promise.all([previous, mine]).then(() => undefined) : mine;
    this.tails.set(key, tail);
    if (previous) await settledOrDeadline(previous, deadline);
    let passed = false;
    return () => {
      if (passed) return;
      passed = true;
      pass();
      if (this.tails.get(key) === tail) this.tails.delete(key);
    };
  }

  /** How many keys have callers in line or in progress (for tests and diagnostics). */
  get size(): number {
    return this.tails.size;
  }
}

async function settledOrDeadline(promise: Promise<void>, deadline: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.max(0, deadline - Date.now()));
  });
  try {
    await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
