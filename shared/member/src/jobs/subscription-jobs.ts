import { CHANNEL, type Beyond, type Bus, type Clock, type SessionStore, type SubscriptionLimits, type SubscriptionRegistry } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";

/** How soon an expired session whose release was cut short (a Redis error, this member dying) is reaped again. */
const EXPIRED_RETRY_MS = 5_000;

/**
 * The registry's housekeeping, run as cluster jobs (one run at a time for the whole cluster):
 * reaping what dead members' sessions held, auditing the counts, and bringing holdings within
 * limits that were lowered. Admission itself stays in the registry's atomic add.
 */
export class SubscriptionJobs {
  private repaired = 0;

  constructor(
    private readonly deps: {
      registry: SubscriptionRegistry;
      sessions: SessionStore;
      bus: Bus;
      logger: Logger;
      clock: Clock;
      /** How long a session nobody holds lives on, for a member to adopt it (`server.sessionIdleMs`). */
      sessionIdleMs: number;
      /** How long a member's heartbeat is missing before it is reaped (see `SubscriptionRegistry.deadInstances`). */
      deadGraceMs: number;
      /** Redis came back lately: the other members may still be reconnecting, so nobody is reaped yet. */
      settling?: () => boolean;
      instanceId: string;
      /** The cluster-wide count of (backend, uri) reached zero: release it upstream. */
      release(backendId: string, uri: string): void;
      /** The jobs a dead member was running go to the others now (see `JobQueue.reclaim`). */
      reclaimJobs?(instance: string): Promise<void>;
      /** Limits exceeded: run the limits job with these limits. */
      enforceLater(limits: SubscriptionLimits): Promise<void>;
    },
  ) {}

  /** Counts the audit repaired since start (for metrics). */
  repairs(): number {
    return this.repaired;
  }

  /**
   * Dead members: the legacy sessions they held are let go (their records live on for
   * `sessionIdleMs`, for any member to adopt, and keep what they hold); what else they held (listen
   * streams) is released. Then the let-go sessions nobody adopted in time end: what they held is released.
   */
  async reap(): Promise<void> {
    // Looked for even while settling: the suspects' clocks start now.
    const dead = await this.deps.registry.deadInstances(this.deps.deadGraceMs);
    for (const instance of this.deps.settling?.() === true ? [] : dead) {
      if (!(await this.deps.registry.claimInstance(instance))) continue;
      // Before it leaves the members' list: the heartbeats reclaim only the jobs of members on it,
      // so a reap that came first left its jobs to their locks (a list reload held up ~60 s).
      await this.deps.reclaimJobs?.(instance).catch((error: unknown) => this.deps.logger.warn({ instance, err: (error as Error).message }, "cannot hand a dead member's jobs to the others; they go once their locks lapse"));
      const orphaned = await this.deps.sessions.orphan(instance, this.deps.sessionIdleMs);
      const released = await this.deps.registry.reapInstance(instance);
      this.deps.logger.warn({ instance, sessionsKept: orphaned.length, released: released.length }, "a cluster member (broker or worker) died: its sessions wait for another to adopt them; the rest of what it held is released");
      for (const { backendId, uri } of released) this.deps.release(backendId, uri);
    }
    // An expired session comes back until it is marked released: a reap cut short does it again.
    for (const key of await this.deps.sessions.expired(this.deps.clock.now(), EXPIRED_RETRY_MS)) {
      const refs = await this.deps.registry.ofSession(key.principal, key.sessionId);
      for (const ref of refs) {
        if ((await this.deps.registry.remove(ref)).last) this.deps.release(ref.backendId, ref.uri);
      }
      await this.deps.sessions.released(key);
      this.deps.logger.info({ principal: key.principal, session: key.sessionId, released: refs.length }, "a session nobody adopted expired; released what it held");
    }
  }

  /** Recounts and repairs the counts; holdings beyond `limits` (they were lowered) get the limits job. */
  async audit(limits: SubscriptionLimits): Promise<void> {
    const report = await this.deps.registry.audit();
    for (const repair of report.repairs) {
      this.repaired++;
      this.deps.logger.warn(repair, "subscription count drifted; repaired");
    }
    if (report.largestSession > limits.perSession || report.largestPrincipal > limits.perPrincipal || report.total > limits.total) {
      this.deps.logger.warn({ limits, largestSession: report.largestSession, largestPrincipal: report.largestPrincipal, total: report.total }, "subscriptions beyond the limits; removing the newest");
      await this.deps.enforceLater(limits);
    }
  }

  /**
   * Removes the newest subscriptions beyond `limits` and tells each affected session or listen
   * stream (through whichever member holds it) which of its subscriptions went and why.
   */
  async enforce(limits: SubscriptionLimits): Promise<void> {
    const beyond = await this.deps.registry.beyond(limits);
    const revoked = new Map<string, { first: Beyond; resources: { backendId: string; uri: string }[] }>();
    for (const entry of beyond) {
      const { ref } = entry;
      const outcome = await this.deps.registry.remove(ref);
      if (!outcome.removed) continue;
      if (outcome.last) this.deps.release(ref.backendId, ref.uri);
      const key = `${ref.principal}\u0000${ref.sessionId}\u0000${entry.limit}`;
      const session = revoked.get(key) ?? { first: entry, resources: [] };
      session.resources.push({ backendId: ref.backendId, uri: ref.uri });
      revoked.set(key, session);
    }
    for (const { first, resources } of revoked.values()) {
      this.deps.logger.warn({ principal: first.ref.principal, session: first.ref.sessionId, limit: first.limit, max: first.max, removed: resources.length }, "subscriptions removed: beyond a lowered limit");
      const message = { kind: "subscriptions.revoked" as const, v: 1 as const, origin: this.deps.instanceId, principal: first.ref.principal, sessionId: first.ref.sessionId, resources, limit: first.limit, max: first.max };
      await this.deps.bus.publish(CHANNEL.revocations, message);
      // A legacy session no member holds now (handed off, or its member died) is told when one adopts it.
      await this.deps.sessions.remind({ principal: first.ref.principal, sessionId: first.ref.sessionId }, JSON.stringify(message)).catch((error: unknown) => this.deps.logger.warn({ session: first.ref.sessionId, err: (error as Error).message }, "cannot keep the notice for the session's next holder"));
    }
  }
}
