import type { Bus, Clock, TimerHandle } from "@mcp-broker/shared";
import type { PreparedNotification } from "./prepared-notification.js";

/** Something notifications can be written to: a legacy session or a modern listen stream. */
export interface NotificationSink {
  readonly principal: string;
  deliver(notification: PreparedNotification): void;
}

/**
 * This instance's interest: bus channel → local sinks. The bus channel is subscribed when the
 * first local sink arrives and unsubscribed a grace period after the last one leaves (so a quick
 * unsubscribe/subscribe does not churn the bus).
 */
export class InterestTable {
  private readonly sinks = new Map<string, Set<NotificationSink>>();
  private readonly graceTimers = new Map<string, TimerHandle>();

  constructor(private readonly deps: { bus: Bus; clock: Clock; graceMs: number; onError: (error: unknown) => void }) {}

  add(channel: string, sink: NotificationSink): void {
    const timer = this.graceTimers.get(channel);
    if (timer !== undefined) {
      this.deps.clock.clearTimeout(timer);
      this.graceTimers.delete(channel);
    }
    let set = this.sinks.get(channel);
    if (set === undefined) {
      set = new Set();
      this.sinks.set(channel, set);
      void this.deps.bus.subscribe(channel).catch(this.deps.onError);
    }
    set.add(sink);
  }

  remove(channel: string, sink: NotificationSink): void {
    const set = this.sinks.get(channel);
    if (set?.delete(sink) !== true || set.size > 0) return;
    this.sinks.delete(channel);
    const timer = this.deps.clock.setTimeout(() => {
      this.graceTimers.delete(channel);
      if (!this.sinks.has(channel)) void this.deps.bus.unsubscribe(channel).catch(this.deps.onError);
    }, this.deps.graceMs);
    timer.unref?.();
    this.graceTimers.set(channel, timer);
  }

  of(channel: string): ReadonlySet<NotificationSink> | undefined {
    return this.sinks.get(channel);
  }

  /** Number of (channel, sink) pairs, for metrics and tests. */
  size(): number {
    let n = 0;
    for (const set of this.sinks.values()) n += set.size;
    return n;
  }

  close(): void {
    for (const timer of this.graceTimers.values()) this.deps.clock.clearTimeout(timer);
    this.graceTimers.clear();
    this.sinks.clear();
  }
}
