import type { Clock, TimerHandle } from "@mcp-broker/shared";

interface Timer {
  readonly id: number;
  readonly at: number;
  readonly callback: () => void;
}

/** Lets pending promise callbacks and I/O callbacks of in-process transports run. */
export async function settle(rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/**
 * A clock that moves only when told. `advance` fires the due timers in time order and lets the
 * promises they start settle between timers, so debounce and backoff run exactly as in real time.
 */
export class ManualClock implements Clock {
  private time = 1_000_000;
  private nextId = 0;
  private readonly timers = new Map<number, Timer>();
  private readonly waiting: { ready: () => boolean; resolve: () => void }[] = [];

  now(): number {
    return this.time;
  }

  setTimeout(callback: () => void, ms: number): TimerHandle {
    const id = ++this.nextId;
    this.timers.set(id, { id, at: this.time + Math.max(0, ms), callback });
    for (const waiter of this.waiting.filter((w) => w.ready())) {
      this.waiting.splice(this.waiting.indexOf(waiter), 1);
      waiter.resolve();
    }
    return { id } as TimerHandle;
  }

  clearTimeout(handle: TimerHandle): void {
    this.timers.delete((handle as { id: number }).id);
  }

  /** Delays (from now) of the timers still pending, soonest first. */
  pendingDelays(): number[] {
    return [...this.timers.values()].map((timer) => timer.at - this.time).sort((a, b) => a - b);
  }

  /**
   * Resolves once `count` timers due `ms` from now are pending: at once if they are, otherwise as
   * soon as they are set. The awaited way to know that a debounce, backoff or retry started.
   */
  timerSet(ms: number, count = 1): Promise<void> {
    const ready = (): boolean => this.pendingDelays().filter((delay) => delay === ms).length >= count;
    if (ready()) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push({ ready, resolve }));
  }

  async advance(ms: number): Promise<void> {
    const target = this.time + ms;
    await settle();
    for (;;) {
      const due = [...this.timers.values()].filter((timer) => timer.at <= target).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (due === undefined) break;
      this.timers.delete(due.id);
      this.time = due.at;
      due.callback();
      await settle();
    }
    this.time = target;
    await settle();
  }
}
