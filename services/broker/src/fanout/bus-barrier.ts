import { CHANNEL, type Bus, type Clock, type TimerHandle } from "@mcp-broker/shared";

/** How long a barrier waits for its message to come back before it gives up (the bus is away or far behind). */
export const BARRIER_TIMEOUT_MS = 2_000;

interface Waiter {
  resolve(): void;
  reject(error: Error): void;
}

/** The callers of one barrier message, and its timer once it is sent. */
interface Batch {
  readonly id: number;
  readonly waiters: Waiter[];
  timer?: TimerHandle;
}

/**
 * A round trip through the bus to this member itself: `pass()` publishes a `bus.barrier` on its
 * own reply channel and resolves once it comes back. Redis hands a subscriber messages in the order
 * it executed their publishes, on one connection (on a cluster, every channel of a deployment is
 * in one slot), and the memory bus delivers in publish order: so when the barrier is back, every
 * message published before it was sent has been received, and handled (receiving is synchronous:
 * an update has its event id and is delivered, a list change is applied and announced).
 *
 * The callers of one tick share one message, sent once the tick's work is done (each asked after
 * what it waits for had happened, so a message sent later serves it as well): a crowd of listens
 * costs one round trip, not one each.
 *
 * A listen's acknowledgement and a resumption's announcements use it to name a position reserved in
 * the cluster's order (see `SessionResume.caughtUp`): no event handed out before that position can
 * arrive after it.
 */
export class BusBarrier {
  private next = 0;
  /** The batch the callers of this tick join, not sent yet. */
  private gathering: Batch | undefined;
  private readonly sent = new Map<number, Batch>();

  constructor(
    private readonly deps: {
      bus: Bus;
      instanceId: string;
      clock: Clock;
      timeoutMs?: number;
    },
  ) {}

  /** Resolves once a barrier sent after this call is back; rejects when it cannot be sent or did not come back in time. */
  pass(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (this.gathering === undefined) {
        this.gathering = { id: ++this.next, waiters: [] };
        process.nextTick(() => this.send());
      }
      this.gathering.waiters.push({ resolve, reject });
    });
  }

  /** A `bus.barrier` arrived on this member's reply channel. */
  received(message: { origin: string; id: number }): void {
    if (message.origin !== this.deps.instanceId) return;
    this.settle(message.id);
  }

  private send(): void {
    const batch = this.gathering;
    this.gathering = undefined;
    if (batch === undefined) return;
    this.sent.set(batch.id, batch);
    batch.timer = this.deps.clock.setTimeout(() => this.settle(batch.id, new Error("the bus barrier did not come back in time")), this.deps.timeoutMs ?? BARRIER_TIMEOUT_MS);
    batch.timer.unref?.();
    this.deps.bus
      .publish(CHANNEL.replies(this.deps.instanceId), { kind: "bus.barrier", v: 1, origin: this.deps.instanceId, id: batch.id })
      .catch((error: unknown) => this.settle(batch.id, error instanceof Error ? error : new Error(String(error))));
  }

  private settle(id: number, error?: Error): void {
    const batch = this.sent.get(id);
    if (batch === undefined) return;
    this.sent.delete(id);
    if (batch.timer !== undefined) this.deps.clock.clearTimeout(batch.timer);
    for (const waiter of batch.waiters) {
      if (error === undefined) waiter.resolve();
      else waiter.reject(error);
    }
  }
}
