import type { JobQueue } from "@mcp-broker/shared";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ListChanges } from "../../src/catalog/list-changes.js";
import type { ClusterJob } from "../../src/jobs/cluster-jobs.js";
import { createLogger } from "../../src/logger.js";

/** A queue that records what it is asked. */
function recordingQueue(): { queue: JobQueue<ClusterJob>; calls: string[] } {
  const calls: string[] = [];
  const queue = {
    schedule: async (key: string) => void calls.push(`schedule ${key}`),
    repeat: async (key: string) => void calls.push(`repeat ${key}`),
    stopRepeat: async (key: string) => void calls.push(`stop ${key}`),
  } as unknown as JobQueue<ClusterJob>;
  return { queue, calls };
}

describe("ListChanges", () => {
  it("sets a watched backend's periodic reloads when it starts watching, and again once a minute while it watches", () => {
    const { queue, calls } = recordingQueue();
    let now = 0;
    const changes = new ListChanges({ jobs: queue, backends: [], debounceMs: 100, relistIntervalMs: 30_000, watching: () => true, logger: createLogger("silent"), now: () => now });
    // Tools are announced, prompts are not (relisted), resources are not offered.
    const backend = { id: "b", capabilities: { tools: { listChanged: true }, prompts: {} } };
    changes.watching(backend);
    expect(calls.filter((c) => c.startsWith("schedule"))).toHaveLength(3);
    expect(calls.filter((c) => !c.startsWith("schedule"))).toEqual(["stop reload:b:tools", "repeat reload:b:prompts", "stop reload:b:resources"]);
    calls.length = 0;
    now = 59_000;
    changes.stillWatching(backend);
    expect(calls).toEqual([]);
    now = 61_000;
    changes.stillWatching(backend);
    // A member whose config lacked the backend may have stopped it meanwhile: set again, no reload.
    expect(calls).toEqual(["stop reload:b:tools", "repeat reload:b:prompts", "stop reload:b:resources"]);
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("tries a reload Redis refused to schedule again (a failover under way) until it is scheduled, while it watches", async () => {
    vi.useFakeTimers();
    const scheduled: string[] = [];
    let refusals = 3;
    const queue = {
      schedule: async (key: string) => {
        if (refusals-- > 0) throw new Error("CLUSTERDOWN The cluster is down");
        scheduled.push(key);
      },
    } as unknown as JobQueue<ClusterJob>;
    let watching = true;
    const changes = new ListChanges({ jobs: queue, backends: [], debounceMs: 100, relistIntervalMs: 30_000, watching: () => watching, logger: createLogger("silent"), now: () => Date.now() });
    changes.listChanged("b", "tools");
    await vi.advanceTimersByTimeAsync(250 + 500 + 1_000);
    expect(scheduled).toEqual(["reload:b:tools"]);
    // No longer the watcher: its new watcher reloads everything, nothing is tried again here.
    refusals = 1;
    changes.listChanged("b", "tools");
    watching = false;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(scheduled).toEqual(["reload:b:tools"]);
  });
});
