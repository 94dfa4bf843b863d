import { systemClock, type Bus, type SessionStore, type SubscriptionRegistry } from "@mcp-broker/shared";
import { describe, expect, it } from "vitest";
import { SubscriptionJobs } from "../../src/jobs/subscription-jobs.js";
import { createLogger } from "../../src/logger.js";

/** The jobs over a fake registry and session store (the sessions: nothing to orphan, nothing expired). */
function reapJobs(registry: SubscriptionRegistry, extra: Partial<ConstructorParameters<typeof SubscriptionJobs>[0]> = {}): SubscriptionJobs {
  const sessions = { orphan: async () => [], expired: async () => [] } as unknown as SessionStore;
  return new SubscriptionJobs({
    registry,
    sessions,
    bus: {} as Bus,
    logger: createLogger("silent"),
    clock: systemClock,
    sessionIdleMs: 1_000,
    deadGraceMs: 0,
    instanceId: "me",
    release: () => undefined,
    enforceLater: async () => undefined,
    ...extra,
  });
}

describe("the reap job", () => {
  it("reaps nobody while Redis came back lately (the others may still be reconnecting), then the dead", async () => {
    const claimed: string[] = [];
    const registry = {
      deadInstances: async () => ["gone"],
      claimInstance: async (id: string) => (claimed.push(id), true),
      reapInstance: async () => [],
    } as unknown as SubscriptionRegistry;
    let settling = true;
    const jobs = reapJobs(registry, { settling: () => settling });
    await jobs.reap();
    expect(claimed).toEqual([]);
    settling = false;
    await jobs.reap();
    expect(claimed).toEqual(["gone"]);
  });

  it("hands a dead member's jobs to the others before it leaves the members' list (the heartbeats reclaim only from that list)", async () => {
    const calls: string[] = [];
    const registry = {
      deadInstances: async () => ["gone"],
      claimInstance: async () => true,
      reapInstance: async (id: string) => (calls.push(`reap ${id}`), []),
    } as unknown as SubscriptionRegistry;
    const jobs = reapJobs(registry, { reclaimJobs: async (id) => void calls.push(`reclaim ${id}`) });
    await jobs.reap();
    expect(calls).toEqual(["reclaim gone", "reap gone"]);
  });
});
