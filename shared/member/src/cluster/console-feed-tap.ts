import { CHANNEL, type Bus, type BusMessage, type Clock, type TimerHandle } from "@mcp-broker/shared";

/** How often the updates gathered for open console feeds go out. */
const FLUSH_MS = 250;
/** At most this many updates per flush; the rest are only counted (a console shows a sample of a storm). */
const MAX_PER_FLUSH = 200;

/**
 * The watcher's side of the operator console's live feed. Only the member watching a backend hears
 * all its updates, so while any console's feed is open somewhere in the cluster (it announces itself
 * with `console.listen` on `CHANNEL.console`, again and again while open), this member copies the
 * updates it publishes to `CHANNEL.consoleFeed`, gathered into one message per `FLUSH_MS`. While no
 * console listens this costs one comparison per update.
 */
export class ConsoleFeedTap {
  /** Until when a console listens (epoch ms; 0: none). */
  private until = 0;
  private gathered: { backendId: string; uri: string; at: number }[] = [];
  private dropped = 0;
  private timer: TimerHandle | undefined;

  constructor(private readonly deps: { bus: Bus; clock: Clock; instanceId: string }) {}

  /** A console's feed is open: copy updates for `ttlMs` from now. */
  listen(message: Extract<BusMessage, { kind: "console.listen" }>): void {
    this.until = Math.max(this.until, this.deps.clock.now() + message.ttlMs);
  }

  /** An update this member published (see `UpstreamSubscriptions.resourceUpdated`). */
  updated(backendId: string, uri: string, at: number): void {
    if (this.until === 0) return;
    if (at > this.until) {
      this.until = 0;
      return;
    }
    if (this.gathered.length < MAX_PER_FLUSH) this.gathered.push({ backendId, uri, at });
    else this.dropped++;
    this.timer ??= this.deps.clock.setTimeout(() => this.flush(), FLUSH_MS);
  }

  close(): void {
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.until = 0;
  }

  private flush(): void {
    this.timer = undefined;
    const updates = this.gathered;
    const dropped = this.dropped;
    this.gathered = [];
    this.dropped = 0;
    // A console that misses a batch (Redis away) misses a sample of its feed, nothing clients get.
    void this.deps.bus.publish(CHANNEL.consoleFeed, { kind: "console.updates", v: 1, origin: this.deps.instanceId, updates, dropped }).catch(() => undefined);
  }
}
