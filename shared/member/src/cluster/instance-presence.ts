import type { Clock, SubscriptionRegistry, TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";

export interface InstancePresenceDeps {
  registry: SubscriptionRegistry;
  clock: Clock;
  logger: Logger;
  /** How long the cluster counts this instance alive after a heartbeat; one is sent every fifth of it. */
  ttlMs: number;
  /**
   * The cluster had claimed this instance as dead and reaped it (see `SubscriptionRegistry.heartbeat`):
   * its sessions leave it (legacy ones to be adopted elsewhere, listen streams end).
   */
  presumedDead(): void | Promise<void>;
  /** Redis lost this instance's writes since its last heartbeat: write back what it holds (runs beside the heartbeats). */
  writesLost(): Promise<void>;
  /** Releases that failed earlier (Redis unreachable when a session ended) are tried again. */
  retryReleases(): void;
  /** A heartbeat landed and found this instance's writes kept: what Redis holds of it is the cluster's word. */
  steady?(): void;
  /** Runs before each heartbeat: the cluster's state is checked (see `Member`'s recovery). */
  beforeHeartbeat?(): Promise<void>;
}

/** How often a member heartbeats (and the cluster looks for dead members): a fifth of the TTL, at least 200 ms. */
export function heartbeatIntervalMs(ttlMs: number): number {
  return Math.max(200, Math.floor(ttlMs / 5));
}

/**
 * This instance's liveness in the cluster: a heartbeat every fifth of the TTL. What the sessions of
 * instances without one held is released by the cluster's reap job (see `SubscriptionJobs`). An
 * instance whose heartbeat had expired (it could not reach Redis for longer than the TTL, or
 * stalled) and that another member reaped meanwhile lets its sessions go, since the cluster took
 * over what they hold.
 */
export class InstancePresence {
  private timer: TimerHandle | undefined;
  private closed = false;

  constructor(private readonly deps: InstancePresenceDeps) {}

  async start(): Promise<void> {
    await this.tick();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
  }

  private async tick(): Promise<void> {
    await this.deps.beforeHeartbeat?.().catch((error: unknown) => this.deps.logger.warn({ err: (error as Error).message }, "checking the cluster's state failed"));
    try {
      const beat = await this.deps.registry.heartbeat(this.deps.ttlMs);
      if (!beat.alive) await this.deps.presumedDead();
      else if (!beat.lost) this.deps.steady?.();
      // Not awaited: a write-back of many sessions takes seconds, and the heartbeats go on meanwhile
      // (a member that stopped heartbeating for it was reaped).
      else void this.deps.writesLost().catch((error: unknown) => this.deps.logger.warn({ err: (error as Error).message }, "writing back what this member holds failed; the next heartbeat tries again"));
    } catch (error) {
      this.deps.logger.warn({ err: (error as Error).message }, "heartbeat failed");
    }
    this.deps.retryReleases();
    if (this.closed) return;
    this.timer = this.deps.clock.setTimeout(() => void this.tick(), heartbeatIntervalMs(this.deps.ttlMs));
    this.timer.unref?.();
  }
}
