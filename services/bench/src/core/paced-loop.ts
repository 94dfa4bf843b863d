import { nowMicros } from "./clock.js";

export interface PacedResult {
  emitted: number;
  /** From the first emission to the last, ms. */
  tookMs: number;
  /** Largest delay of an emission behind its schedule, ms (the emitter falling behind). */
  maxLagMs: number;
  startMicros: number;
}

/** Backpressure of the sink the loop writes to: while `blocked()`, emission waits for `unblocked()`. */
export interface Backpressure {
  blocked(): boolean;
  unblocked(): Promise<void>;
}

const NEVER_BLOCKED: Backpressure = { blocked: () => false, unblocked: () => Promise.resolve() };

/**
 * Calls `emit(i)` for i = 0…count-1 at `rate` per second, item i due at i/rate s after the start.
 * Timers fire about every millisecond, so items due in the same millisecond go out together; each
 * item's timestamp is taken by `emit` itself at the moment it is sent. While the sink is
 * back-pressured, emission pauses (the receiver is slower than the rate): the shortfall shows as a
 * lower achieved rate and a larger `maxLagMs`, and nothing queues up unboundedly in the emitter.
 */
export function pacedLoop(rate: number, count: number, emit: (i: number) => void, backpressure: Backpressure = NEVER_BLOCKED): Promise<PacedResult> {
  return new Promise((resolve) => {
    const start = nowMicros();
    let i = 0;
    let maxLag = 0;
    const tick = (): void => {
      const elapsed = nowMicros() - start;
      const due = Math.min(count, Math.floor((elapsed * rate) / 1e6) + 1);
      if (i < due) maxLag = Math.max(maxLag, elapsed - (i * 1e6) / rate);
      while (i < due) {
        if (backpressure.blocked()) {
          void backpressure.unblocked().then(tick);
          return;
        }
        emit(i++);
      }
      if (i >= count) {
        resolve({ emitted: i, tookMs: (nowMicros() - start) / 1000, maxLagMs: maxLag / 1000, startMicros: start });
        return;
      }
      const nextAt = (i * 1e6) / rate;
      setTimeout(tick, Math.max(0, (nextAt - (nowMicros() - start)) / 1000));
    };
    tick();
  });
}
