import type { JobQueue } from "@mcp-broker/shared";
import { describe, expect, it } from "vitest";
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
});
