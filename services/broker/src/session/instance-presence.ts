import type { Clock, SubscriptionRegistry, TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";

export interface InstancePresenceDeps {
  registry: SubscriptionRegistry;
  clock: Clock;
  logger: Logger;
  /** How long the cluster counts this instance alive after a heartbeat; one is sent every fifth of it. */
  ttlMs: number;
  /** The cluster-wide count of (backend, uri) reached zero by reaping: release it upstream. */
  release(backendId: string, uri: string): void;
  /** This instance had been presumed dead: end its sessions (their clients start over cleanly). */
  presumedDead(): void;
  /** Releases that failed earlier (Redis unreachable when a session ended) are tried again. */
  retryReleases(): void;
}

/**
 * This instance's liveness in the cluster, and the clean-up after instances that died: each tick
 * sends a heartbeat and releases what the sessions of instances without one held (the last release
 * unsubscribes upstream, as for any other). An instance whose heartbeat had expired (it could not
 * reach Redis for longer than the TTL, or stalled) ends its sessions, since the others may have
 * released their subscriptions already.
 */
export class InstancePresence {
  private timer: TimerHandle | undefined;
  private closed = false;
  private reaping = false;

  constructor(private readonly deps: InstancePresenceDeps) {}

  async start(): Promise<void> {
    await this.tick();
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.deps.clock.clearTimeout(this.timer);
  }

  /** Heartbeats on their own clock: reaping (which may take long after a big instance died) runs beside them, one at a time. */
  private async tick(): Promise<void> {
    try {
      if (!(await this.deps.registry.heartbeat(this.deps.ttlMs))) {
        this.deps.logger.error({ ttlMs: this.deps.ttlMs }, "this instance was presumed dead by the cluster (no heartbeat within the TTL): ending its sessions");
        this.deps.presumedDead();
      }
    } catch (error) {
      this.deps.logger.warn({ err: (error as Error).message }, "heartbeat failed");
    }
    this.deps.retryReleases();
    if (!this.reaping) {
      this.reaping = true;
      void this.reap().finally(() => (this.reaping = false));
    }
    if (this.closed) return;
    this.timer = this.deps.clock.setTimeout(() => void this.tick(), Math.max(200, Math.floor(this.deps.ttlMs / 5)));
    this.timer.unref?.();
  }

  private async reap(): Promise<void> {
    try {
      const released = await this.deps.registry.reapDead();
      if (released.length > 0) this.deps.logger.warn({ released: released.length }, "released the subscriptions of dead broker instances");
      for (const { backendId, uri } of released) this.deps.release(backendId, uri);
    } catch (error) {
      this.deps.logger.warn({ err: (error as Error).message }, "reaping dead instances failed");
    }
  }
}
