export interface Expiry {
  readonly key: string;
  /** Epoch ms after which the key is gone. */
  readonly at: number;
}

// A binary min-heap, so that keys nobody reads again are found without scanning every key. A key
// set again keeps its older entries here; the keyspace skips those that are no longer its time.
export class ExpiryQueue {
  private heap: Expiry[] = [];

  get size(): number {
    return this.heap.length;
  }

  clear(): void {
    this.heap = [];
  }

  add(key: string, at: number): void {
    const heap = this.heap;
    heap.push({ key, at });
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent]!.at <= heap[i]!.at) break;
      [heap[parent], heap[i]] = [heap[i]!, heap[parent]!];
      i = parent;
    }
  }

  /** Takes out the earliest expiry when its time is before `now`; `undefined` when none is. */
  takeDue(now: number): Expiry | undefined {
    return this.heap.length > 0 && this.heap[0]!.at < now ? this.pop() : undefined;
  }

  private pop(): Expiry {
    const heap = this.heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        const right = left + 1;
        let least = i;
        if (left < heap.length && heap[left]!.at < heap[least]!.at) least = left;
        if (right < heap.length && heap[right]!.at < heap[least]!.at) least = right;
        if (least === i) break;
        [heap[least], heap[i]] = [heap[i]!, heap[least]!];
        i = least;
      }
    }
    return top;
  }
}
