import { CHANNEL, type Bus, type Clock } from "@mcp-broker/shared";

/** How long a barrier waits for its message to come back before it gives up (the bus is away or far behind). */
export const BARRIER_TIMEOUT_MS = 2_000;

/**
 * A round trip through the bus to this member itself: `pass()` publishes a `bus.barrier` on its
 * own reply channel and resolves once it comes back. Redis hands a subscriber messages in the order
 * it executed their publishes, on one connection (on a cluster, every channel of a deployment is
 * in one slot), and the memory bus delivers in publish order: so when the barrier is back, every
 * message published before it was sent has been received, and handled (receiving is synchronous:
 * an update has its event id and is delivered, a list change is applied and announced).
 *
 * A resumption uses it to name a position reserved in the cluster's order (see
 * `SessionResume.caughtUp`): no event handed out before that position can arrive after it.
 */
export class BusBarrier {
  private next = 0;
  private readonly waiting = new Map<number, () => void>();

  constructor(
    private readonly deps: {
      bus: Bus;
      instanceId: string;
      clock: Clock;
      timeoutMs?: number;
    },
  ) {}

  /** Resolves once the barrier is back; rejects when it cannot be sent or did not come back in time. */
  pass(): Promise<void> {
    const id = ++this.next;
    return new Promise<void>((resolve, reject) => {
      const settle = (error?: Error) => {
        if (!this.waiting.delete(id)) return;
        this.deps.clock.clearTimeout(timer);
        if (error === undefined) resolve();
        else reject(error);
      };
      this.waiting.set(id, () => settle());
      const timer = this.deps.clock.setTimeout(() => settle(new Error("the bus barrier did not come back in time")), this.deps.timeoutMs ?? BARRIER_TIMEOUT_MS);
      timer.unref?.();
      this.deps.bus.publish(CHANNEL.replies(this.deps.instanceId), { kind: "bus.barrier", v: 1, origin: this.deps.instanceId, id }).catch((error: unknown) => settle(error instanceof Error ? error : new Error(String(error))));
    });
  }

  /** A `bus.barrier` arrived on this member's reply channel. */
  received(message: { origin: string; id: number }): void {
    if (message.origin !== this.deps.instanceId) return;
    this.waiting.get(message.id)?.();
  }
}
