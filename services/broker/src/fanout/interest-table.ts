import { CHANNEL, type Bus, type Clock, type ListName, type TimerHandle } from "@mcp-broker/shared";
import type { PreparedNotification } from "./prepared-notification.js";

/** A backend resource a client subscribed to. */
export interface SubscriptionTarget {
  backendId: string;
  /** The URI in the backend's own form. */
  uri: string;
}

/** Something notifications can be written to: a legacy session or a modern listen stream. */
export interface NotificationSink {
  readonly principal: string;
  deliver(notification: PreparedNotification): void;
  /** Whether it asked to hear changes to `list` (absent: it hears them all). */
  wants?(list: ListName): boolean;
}

interface Interest {
  readonly target: SubscriptionTarget;
  readonly sinks: Set<NotificationSink>;
  /** The bus SUBSCRIBE made when the first sink came (settled once it is subscribed, or failed); undefined once settled. */
  subscribing: Promise<void> | undefined;
}

/**
 * This instance's interest: bus channel → the subscribed target and its local sinks. The bus channel is subscribed when the
 * first local sink arrives and unsubscribed a grace period after the last one leaves (so a quick
 * unsubscribe/subscribe does not churn the bus).
 */
export class InterestTable {
  private readonly interests = new Map<string, Interest>();
  private readonly graceTimers = new Map<string, TimerHandle>();

  constructor(private readonly deps: { bus: Bus; clock: Clock; graceMs: number; onError: (error: unknown) => void }) {}

  /**
   * The bus SUBSCRIBE still under way for the channel, to wait for before telling the client it is
   * subscribed (an update published before it lands would not reach this member); undefined when
   * the channel is subscribed already (most of the time). Never rejects (failures go to `onError`).
   */
  add(target: SubscriptionTarget, sink: NotificationSink): Promise<void> | undefined {
    const channel = CHANNEL.resource(target.backendId, target.uri);
    const timer = this.graceTimers.get(channel);
    if (timer !== undefined) {
      this.deps.clock.clearTimeout(timer);
      this.graceTimers.delete(channel);
    }
    let interest = this.interests.get(channel);
    if (interest === undefined) {
      const made: Interest = { target: { backendId: target.backendId, uri: target.uri }, sinks: new Set(), subscribing: undefined };
      made.subscribing = this.deps.bus
        .subscribe(channel)
        .catch(this.deps.onError)
        .finally(() => (made.subscribing = undefined));
      interest = made;
      this.interests.set(channel, interest);
    }
    interest.sinks.add(sink);
    // A later sink waits for the same SUBSCRIBE while it is under way.
    return interest.subscribing;
  }

  remove(target: SubscriptionTarget, sink: NotificationSink): void {
    const channel = CHANNEL.resource(target.backendId, target.uri);
    const interest = this.interests.get(channel);
    if (interest?.sinks.delete(sink) !== true || interest.sinks.size > 0) return;
    this.interests.delete(channel);
    const timer = this.deps.clock.setTimeout(() => {
      this.graceTimers.delete(channel);
      if (!this.interests.has(channel)) void this.deps.bus.unsubscribe(channel).catch(this.deps.onError);
    }, this.deps.graceMs);
    timer.unref?.();
    this.graceTimers.set(channel, timer);
  }

  of(channel: string): ReadonlySet<NotificationSink> | undefined {
    return this.interests.get(channel)?.sinks;
  }

  /** Every subscribed target with its sinks. */
  all(): IterableIterator<Interest> {
    return this.interests.values();
  }

  /** Number of (channel, sink) pairs, for metrics and tests. */
  size(): number {
    let n = 0;
    for (const { sinks } of this.interests.values()) n += sinks.size;
    return n;
  }

  close(): void {
    for (const timer of this.graceTimers.values()) this.deps.clock.clearTimeout(timer);
    this.graceTimers.clear();
    this.interests.clear();
  }
}
