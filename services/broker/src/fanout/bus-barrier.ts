import { CHANNEL, type Clock, type TimerHandle, type UpdateLog } from "@mcp-broker/shared";

/** How long a catch-up waits for its barrier to come back before it gives up (the bus is away or far behind). */
export const BARRIER_TIMEOUT_MS = 2_000;

interface Waiter {
  resolve(position: number): void;
  reject(error: Error): void;
}

/** The callers of one tick: one reservation and one barrier message for all of them. */
interface Batch {
  readonly id: number;
  readonly waiters: Waiter[];
  timer?: TimerHandle;
  /** The reserved position, once Redis answered. */
  position?: number;
  /** The barrier message came back. */
  back: boolean;
}

/**
 * Positions in the cluster's order that this member has caught up with. `caughtUp()` reserves a
 * position (`UpdateLog.reserve`) and, in the same step, publishes a `bus.barrier` on this member's
 * own reply channel; it resolves with the position once the barrier is back. Redis hands a
 * subscriber messages in the order it executed their publishes, on one connection (on a cluster,
 * every channel of a deployment is in one slot), and the memory bus delivers in publish order: so
 * when the barrier is back, every message published before the position was handed out has been
 * received, and handled (receiving is synchronous: an update has its event id and is delivered, a
 * list change is applied and announced).
 *
 * The callers of one tick share one reservation and one message, made once the tick's work is
 * done (each asked after what the position must follow had happened: a listen's upstream watches
 * began, a resumption's stamps were read), so a crowd of listens costs one round trip, not one each.
 *
 * A listen's acknowledgement and a resumption's announcements name such a position: no event
 * handed out before it can arrive after it.
 */
export class BusBarrier {
  private next = 0;
  /** The batch the callers of this tick join, not sent yet. */
  private gathering: Batch | undefined;
  private readonly sent = new Map<number, Batch>();

  constructor(
    private readonly deps: {
      updates: Pick<UpdateLog, "reserve">;
      instanceId: string;
      clock: Clock;
      timeoutMs?: number;
    },
  ) {}

  /** A position reserved after this call, once every event before it has reached this member; rejects when Redis or the bus cannot say in time. */
  caughtUp(): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      if (this.gathering === undefined) {
        this.gathering = { id: ++this.next, waiters: [], back: false };
        process.nextTick(() => this.send());
      }
      this.gathering.waiters.push({ resolve, reject });
    });
  }

  /** A `bus.barrier` arrived on this member's reply channel. */
  received(message: { origin: string; id: number }): void {
    if (message.origin !== this.deps.instanceId) return;
    const batch = this.sent.get(message.id);
    if (batch === undefined) return;
    batch.back = true;
    this.settle(batch);
  }

  private send(): void {
    const batch = this.gathering;
    this.gathering = undefined;
    if (batch === undefined) return;
    this.sent.set(batch.id, batch);
    batch.timer = this.deps.clock.setTimeout(() => this.settle(batch, new Error("the bus barrier did not come back in time")), this.deps.timeoutMs ?? BARRIER_TIMEOUT_MS);
    batch.timer.unref?.();
    this.deps.updates.reserve({ channel: CHANNEL.replies(this.deps.instanceId), message: { kind: "bus.barrier", v: 1, origin: this.deps.instanceId, id: batch.id } }).then(
      (position) => {
        batch.position = position;
        this.settle(batch);
      },
      (error: unknown) => this.settle(batch, error instanceof Error ? error : new Error(String(error))),
    );
  }

  /** Done once the position is known and the barrier is back, or failed. */
  private settle(batch: Batch, error?: Error): void {
    if (error === undefined && (batch.position === undefined || !batch.back)) return;
    if (!this.sent.delete(batch.id)) return;
    if (batch.timer !== undefined) this.deps.clock.clearTimeout(batch.timer);
    for (const waiter of batch.waiters) {
      if (error !== undefined) waiter.reject(error);
      else waiter.resolve(batch.position as number);
    }
  }
}
