import { backoffDelay, type BackoffPolicy, type Clock, type TimerHandle } from "@mcp-broker/shared";

export interface RetryTimerDeps {
  clock: Clock;
  random: () => number;
  policy: BackoffPolicy;
  /** One try; resolves true when there is nothing left to retry. */
  task(): Promise<boolean>;
  /** A try that threw (it counts as not done). */
  failed(error: unknown): void;
}

/**
 * Runs `task` after backoff delays (attempt 0, 1, …), one try at a time, until a try reports it
 * is done or `stop()` is called. `start()` begins again from the first delay. The timer does not
 * keep a Node process alive by itself.
 */
export class RetryTimer {
  private timer: TimerHandle | undefined;
  private attempt = 0;
  /** Bumped by start() and stop(): a try under way from before does not schedule another. */
  private generation = 0;

  constructor(private readonly deps: RetryTimerDeps) {}

  start(): void {
    this.stop();
    this.attempt = 0;
    this.arm(this.generation);
  }

  stop(): void {
    this.generation++;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(generation: number): void {
    const { clock, policy, random } = this.deps;
    this.timer = clock.setTimeout(() => {
      this.timer = undefined;
      void this.run(generation);
    }, backoffDelay(policy, this.attempt, random));
    this.timer.unref?.();
  }

  private async run(generation: number): Promise<void> {
    let done = false;
    try {
      done = await this.deps.task();
    } catch (error) {
      this.deps.failed(error);
    }
    if (done || generation !== this.generation) return;
    this.attempt++;
    this.arm(generation);
  }
}
