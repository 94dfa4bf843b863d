import { afterEach, describe, vi } from "vitest";
import type { Clock } from "../../src/clock.js";
import { MemoryBus, MemoryBusHub } from "../../src/engine/memory/memory-bus.js";
import { MemoryJobQueue } from "../../src/engine/memory/memory-job-queue.js";
import { MemoryLeases } from "../../src/engine/memory/memory-leases.js";
import { MemoryRegistry } from "../../src/engine/memory/memory-registry.js";
import { MemoryCatalogStore } from "../../src/engine/memory/memory-catalog-store.js";
import { MemoryUpdateLog } from "../../src/engine/memory/memory-update-log.js";
import { MemorySessionStore } from "../../src/engine/memory/memory-session-store.js";
import { MemoryPositions } from "../../src/engine/memory/memory-positions.js";
import { busContract, catalogStoreContract, sessionStoreContract, updateLogContract, jobQueueContract, leasesContract, registryContract } from "../contracts/engine-contracts.js";

busContract("memory", async () => {
  const hub = new MemoryBusHub();
  return [new MemoryBus(hub), new MemoryBus(hub)];
});
updateLogContract("memory", async () => {
  const hub = new MemoryBusHub();
  const positions = new MemoryPositions();
  return { log: new MemoryUpdateLog(new MemoryBus(hub), positions), bus: new MemoryBus(hub), store: new MemoryCatalogStore(positions, new MemoryBus(hub)) };
});
sessionStoreContract("memory", async () => {
  let offset = 0;
  const clock: Clock = { now: () => Date.now() + offset, setTimeout, clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
  return {
    store: new MemorySessionStore(clock),
    elapse: async (ms) => {
      offset += ms;
    },
  };
});
registryContract("memory", async () =>
  Object.assign(new MemoryRegistry(), {
    async corrupt(this: MemoryRegistry) {
      const internals = this as unknown as { perPrincipal: Map<string, number>; total: number };
      internals.perPrincipal.set("p", 99);
      internals.total = 7;
    },
  }),
);
catalogStoreContract("memory", async () => {
  const hub = new MemoryBusHub();
  const positions = new MemoryPositions();
  const store = new MemoryCatalogStore(positions, new MemoryBus(hub));
  return { store: Object.assign(store, { current: () => positions.current() }), bus: new MemoryBus(hub) };
});
leasesContract("memory", async () => {
  let now = 1_000;
  const clock: Clock = { now: () => now, setTimeout, clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
  return {
    leases: new MemoryLeases(clock),
    elapse: async (ms) => {
      now += ms;
    },
  };
});

describe("memory job queue on fake timers", () => {
  afterEach(() => {
    vi.useRealTimers();
  });
  const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
  jobQueueContract("memory", {
    make: async (options) => {
      vi.useFakeTimers();
      return new MemoryJobQueue<number>({ clock, ...options });
    },
    until: async (predicate, what) => {
      for (let i = 0; i < 10_000; i++) {
        if (await predicate()) return;
        await vi.advanceTimersByTimeAsync(5);
      }
      throw new Error(`never: ${what}`);
    },
    elapse: (ms) => vi.advanceTimersByTimeAsync(ms).then(() => undefined),
    now: () => Date.now(),
  });
});
