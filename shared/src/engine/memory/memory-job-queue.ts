import { systemClock, type Clock, type TimerHandle } from "../../clock.js";
import type { JobQueue } from "../jobs.js";

interface KeyState<T> {
  timer: TimerHandle | undefined;
  running: boolean;
  /** Scheduled while running: exactly one more run follows, with the newest data. */
  again: { data: T; delayMs: number } | undefined;
  data: T;
}

/**
 * In-process job queue with the `JobQueue` contract: a burst within the delay gives one run,
 * a schedule during a run gives exactly one more, runs of one key never overlap. A failing run is
 * reported to `onError` and not retried here.
 */
export class MemoryJobQueue<T> implements JobQueue<T> {
  private readonly keys = new Map<string, KeyState<T>>();
  private handler: ((key: string, data: T) => Promise<void>) | undefined;
  private closed = false;

  constructor(private readonly options: { clock?: Clock; onError?: (key: string, error: unknown) => void } = {}) {}

  private get clock(): Clock {
    return this.options.clock ?? systemClock;
  }

  async schedule(key: string, data: T, delayMs: number): Promise<void> {
    if (this.closed) return;
    const state = this.keys.get(key);
    if (state === undefined) {
      const fresh: KeyState<T> = { timer: undefined, running: false, again: undefined, data };
      this.keys.set(key, fresh);
      this.arm(key, fresh, delayMs);
    } else if (state.running) state.again = { data, delayMs };
  }

  process(handler: (key: string, data: T) => Promise<void>): void {
    this.handler = handler;
  }

  async pending(): Promise<string[]> {
    return [...this.keys.keys()];
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const state of this.keys.values()) if (state.timer !== undefined) this.clock.clearTimeout(state.timer);
    this.keys.clear();
  }

  private arm(key: string, state: KeyState<T>, delayMs: number): void {
    state.timer = this.clock.setTimeout(() => {
      state.timer = undefined;
      void this.execute(key, state);
    }, delayMs);
  }

  private async execute(key: string, state: KeyState<T>): Promise<void> {
    if (this.closed) return;
    state.running = true;
    try {
      await this.handler?.(key, state.data);
    } catch (error) {
      this.options.onError?.(key, error);
    } finally {
      state.running = false;
    }
    if (this.closed) return;
    const again = state.again;
    if (again === undefined) {
      this.keys.delete(key);
      return;
    }
    state.again = undefined;
    state.data = again.data;
    this.arm(key, state, again.delayMs);
  }
}
