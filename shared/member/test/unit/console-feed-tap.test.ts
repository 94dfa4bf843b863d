import { CHANNEL, MemoryBus, MemoryBusHub, type BusMessage, type Clock, type TimerHandle } from "@mcp-broker/shared";
import { describe, expect, it, vi } from "vitest";
import { ConsoleFeedTap } from "../../src/cluster/console-feed-tap.js";

/** A clock whose time and timers move only when told. */
function manualClock(): Clock & { advance(ms: number): void } {
  let now = 1_000_000;
  const timers = new Set<{ at: number; run: () => void }>();
  return {
    now: () => now,
    setTimeout: (run, ms) => {
      const timer = { at: now + ms, run };
      timers.add(timer);
      return timer as unknown as TimerHandle;
    },
    clearTimeout: (handle) => void timers.delete(handle as unknown as { at: number; run: () => void }),
    advance(ms) {
      now += ms;
      for (const timer of [...timers].filter((t) => t.at <= now)) {
        timers.delete(timer);
        timer.run();
      }
    },
  };
}

async function setup() {
  const hub = new MemoryBusHub();
  const clock = manualClock();
  const tap = new ConsoleFeedTap({ bus: new MemoryBus(hub), clock, instanceId: "watcher" });
  const consoleBus = new MemoryBus(hub);
  const heard: Extract<BusMessage, { kind: "console.updates" }>[] = [];
  consoleBus.onMessage((_channel, message) => {
    if (message.kind === "console.updates") heard.push(message);
  });
  await consoleBus.subscribe(CHANNEL.consoleFeed);
  const listen = (ttlMs = 15_000) => tap.listen({ kind: "console.listen", v: 1, origin: "console", ttlMs });
  return { tap, clock, heard, listen };
}

describe("ConsoleFeedTap (the watcher's side of the console's live feed)", () => {
  it("copies nothing while no console listens", async () => {
    const { tap, clock, heard } = await setup();
    tap.updated("b", "x", clock.now());
    clock.advance(1_000);
    await Promise.resolve();
    expect(heard).toEqual([]);
  });

  it("gathers the updates of a quarter second into one message while a console listens, and stops when its announcement runs out", async () => {
    const { tap, clock, heard, listen } = await setup();
    listen(10_000);
    tap.updated("b", "x", clock.now());
    tap.updated("c", "y", clock.now());
    expect(heard).toEqual([]);
    clock.advance(250);
    await vi.waitFor(() => expect(heard).toHaveLength(1));
    expect(heard[0]).toMatchObject({ origin: "watcher", updates: [{ backendId: "b", uri: "x" }, { backendId: "c", uri: "y" }], dropped: 0 });
    clock.advance(10_000);
    tap.updated("b", "x", clock.now());
    clock.advance(1_000);
    await Promise.resolve();
    expect(heard).toHaveLength(1);
  });

  it("sends at most 200 updates per message and counts the rest", async () => {
    const { tap, clock, heard, listen } = await setup();
    listen();
    for (let i = 0; i < 250; i++) tap.updated("b", `u${i}`, clock.now());
    clock.advance(250);
    await vi.waitFor(() => expect(heard).toHaveLength(1));
    expect(heard[0]?.updates).toHaveLength(200);
    expect(heard[0]?.dropped).toBe(50);
  });
});
