import { systemClock, type Clock, type TimerHandle } from "../../clock.js";
import { DEFAULT_JOB_OPTIONS, UnrecoverableJobError, type JobObserver, type JobQueue, type JobQueueOptions, type JobStats } from "../jobs.js";

interface KeyState<T> {
  timer: TimerHandle | undefined;
  running: boolean;
  /** Scheduled while running: exactly one more run follows, with the newest data. */
  again: { data: T; delayMs: number } | undefined;
  data: T;
  /** Runs of this job so far (a retry is a run of the same job). */
  attempt: number;
  /** When the armed timer fires (clock time). */
  due: number;
}

/**
 * In-process job queue with the `JobQueue` contract: a burst within the delay gives one run,
 * a schedule during a run gives exactly one more, runs of one key never overlap, a failing run is
 * retried with exponential backoff up to `attempts` runs (a schedule meanwhile brings the retry
 * forward to its own delay: what changed since is not held up by the backoff).
 */
export class MemoryJobQueue<T> implements JobQueue<T> {
  private readonly keys = new Map<string, KeyState<T>>();
  private readonly repeats = new Map<string, TimerHandle>();
  private handler: ((key: string, data: T) => Promise<void>) | undefined;
  private closed = false;
  private readonly counted = { failed: 0, completed: 0 };

  constructor(
    private readonly options: {
      clock?: Clock;
      /** A run failed (it is retried unless `final`). */
      onError?: (key: string, error: unknown, final: boolean) => void;
      onRun?: JobObserver;
    } & Partial<JobQueueOptions> = {},
  ) {}

  private get clock(): Clock {
    return this.options.clock ?? systemClock;
  }

  private get retry(): JobQueueOptions {
    // Without options a failing run is not retried (the client library's list reloads).
    return { attempts: this.options.attempts ?? 1, backoffMs: this.options.backoffMs ?? DEFAULT_JOB_OPTIONS.backoffMs };
  }

  async schedule(key: string, data: T, delayMs: number): Promise<void> {
    if (this.closed) return;
    const state = this.keys.get(key);
    if (state === undefined) {
      const fresh: KeyState<T> = { timer: undefined, running: false, again: undefined, data, attempt: 0, due: 0 };
      this.keys.set(key, fresh);
      this.arm(key, fresh, delayMs);
    } else if (state.running) state.again = { data, delayMs };
    else if (state.attempt > 0 && this.clock.now() + delayMs < state.due) {
      // Waiting out a failed run's backoff: the new schedule runs at its own time, as a new job.
      if (state.timer !== undefined) this.clock.clearTimeout(state.timer);
      state.data = data;
      state.attempt = 0;
      this.arm(key, state, delayMs);
    }
  }

  async repeat(key: string, data: T, everyMs: number): Promise<void> {
    this.clearRepeat(key);
    if (this.closed) return;
    const tick = (): void => {
      const timer = this.clock.setTimeout(() => {
        void this.schedule(key, data, 0);
        tick();
      }, everyMs);
      timer.unref?.();
      this.repeats.set(key, timer);
    };
    tick();
  }

  async stopRepeat(key: string): Promise<void> {
    this.clearRepeat(key);
  }

  private clearRepeat(key: string): void {
    const timer = this.repeats.get(key);
    if (timer !== undefined) this.clock.clearTimeout(timer);
    this.repeats.delete(key);
  }

  process(handler: (key: string, data: T) => Promise<void>): void {
    this.handler = handler;
  }

  /** One process: nobody else runs its jobs. */
  async reclaim(): Promise<number> {
    return 0;
  }

  async pending(): Promise<string[]> {
    return [...this.keys.keys()];
  }

  async stats(): Promise<JobStats> {
    let active = 0;
    let delayed = 0;
    for (const state of this.keys.values()) {
      if (state.running) active++;
      else delayed++;
    }
    return { waiting: 0, delayed, active, ...this.counted };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const state of this.keys.values()) if (state.timer !== undefined) this.clock.clearTimeout(state.timer);
    this.keys.clear();
    for (const key of [...this.repeats.keys()]) this.clearRepeat(key);
  }

  private arm(key: string, state: KeyState<T>, delayMs: number): void {
    state.due = this.clock.now() + delayMs;
    state.timer = this.clock.setTimeout(() => {
      state.timer = undefined;
      void this.execute(key, state);
    }, delayMs);
  }

  private async execute(key: string, state: KeyState<T>): Promise<void> {
    if (this.closed) return;
    state.running = true;
    state.attempt++;
    const started = this.clock.now();
    let failure: { error: unknown } | undefined;
    try {
      await this.handler?.(key, state.data);
    } catch (error) {
      failure = { error };
    } finally {
      state.running = false;
    }
    const durationMs = this.clock.now() - started;
    if (failure !== undefined) {
      const final = failure.error instanceof UnrecoverableJobError || state.attempt >= this.retry.attempts;
      this.options.onError?.(key, failure.error, final);
      this.options.onRun?.({ key, outcome: final ? "failed" : "retry", durationMs, error: failure.error });
      if (final) this.counted.failed++;
      else if (!this.closed) {
        // The same job runs again after its backoff; what was scheduled meanwhile still follows it.
        this.arm(key, state, this.retry.backoffMs * 2 ** (state.attempt - 1));
        return;
      }
    } else {
      this.counted.completed++;
      this.options.onRun?.({ key, outcome: "completed", durationMs });
    }
    if (this.closed) return;
    const again = state.again;
    if (again === undefined) {
      this.keys.delete(key);
      return;
    }
    state.again = undefined;
    state.data = again.data;
    state.attempt = 0;
    this.arm(key, state, again.delayMs);
  }
}
