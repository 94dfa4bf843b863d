import { CHANNEL, type Clock, type TimerHandle, type UpdateLog } from "@mcp-broker/shared";

/** How long a catch-up waits for its barrier to come back before it gives up (the bus is away or far behind). */
export const BARRIER_TIMEOUT_MS = 2_000;

interface Waiter {
  /** Run when the barrier arrives, before any later bus message is handled. */
  run?: (position: number) => void;
  resolve(position: number): void;
  reject(error: Error): void;
}

/** The callers of one tick: one reservation and one barrier message for all of them. */
interface Batch {
  readonly id: number;
  readonly waiters: Waiter[];
  timer?: TimerHandle;
}

/**
 * Positions in the cluster's order that this member has caught up with. `caughtUp()` reserves a
 * position (`UpdateLog.reserve`) and, in the same step, publishes a `bus.barrier` carrying it on
 * this member's own reply channel; it resolves with the position once the barrier is back. Redis
 * hands a subscriber messages in the order it executed their publishes, on one connection (on a
 * cluster, every channel of a deployment is in one slot), and the memory bus delivers in publish
 * order: so when the barrier is back, every message published before the position was handed out
 * has been received, and handled (receiving is synchronous: an update has its event id and is
 * delivered, a list change is applied and announced), and none published after it.
 *
 * The callers of one tick share one reservation and one message, made once the tick's work is
 * done (each asked after what the position must follow had happened: a listen's upstream watches
 * began, a resumption's stamps were read), so a crowd of listens costs one round trip, not one each.
 *
 * A listen's acknowledgement and a resumption's announcements name such a position: no event
 * handed out before it can arrive after it. A change this member makes on its own (`place`) takes
 * its place there, as if the cluster had sent it.
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
    return this.join({});
  }

  /**
   * Runs `run` at a position reserved after this call, in this member's order of bus messages: when
   * the barrier arrives, every event handed out before the position has been handled here and none
   * handed out after it, so what `run` announces with the position as its id comes in order on
   * every stream. Resolves with the position once `run` ran; rejects, and `run` never runs, when
   * Redis or the bus cannot say in time (or with what `run` threw).
   */
  place(run: (position: number) => void): Promise<number> {
    return this.join({ run });
  }

  /** A `bus.barrier` arrived on this member's reply channel. */
  received(message: { origin: string; id: number; position: number }): void {
    if (message.origin !== this.deps.instanceId) return;
    const batch = this.sent.get(message.id);
    if (batch === undefined) return;
    this.settle(batch, message.position);
  }

  private join(waiter: Pick<Waiter, "run">): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      if (this.gathering === undefined) {
        this.gathering = { id: ++this.next, waiters: [] };
        process.nextTick(() => this.send());
      }
      this.gathering.waiters.push({ ...waiter, resolve, reject });
    });
  }

  private send(): void {
    const batch = this.gathering;
    this.gathering = undefined;
    if (batch === undefined) return;
    this.sent.set(batch.id, batch);
    batch.timer = this.deps.clock.setTimeout(() => this.settle(batch, new Error("the bus barrier did not come back in time")), this.deps.timeoutMs ?? BARRIER_TIMEOUT_MS);
    batch.timer.unref?.();
    // The barrier brings the position; the reply matters only when Redis refused.
    this.deps.updates.reserve({ channel: CHANNEL.replies(this.deps.instanceId), message: { kind: "bus.barrier", v: 1, origin: this.deps.instanceId, id: batch.id } }).catch((error: unknown) => {
      this.settle(batch, error instanceof Error ? error : new Error(String(error)));
    });
  }

  /** Done once the barrier is back with its position, or failed; each `run` synchronously, in the order asked. */
  private settle(batch: Batch, outcome: number | Error): void {
    if (!this.sent.delete(batch.id)) return;
    if (batch.timer !== undefined) this.deps.clock.clearTimeout(batch.timer);
    for (const waiter of batch.waiters) {
      if (outcome instanceof Error) {
        waiter.reject(outcome);
        continue;
      }
      try {
        waiter.run?.(outcome);
      } catch (error) {
        waiter.reject(error instanceof Error ? error : new Error(String(error)));
        continue;
      }
      waiter.resolve(outcome);
    }
  }
}
