import { describe, expect, it, vi } from "vitest";
import type { Bus, BusMessage } from "../../src/engine/bus.js";
import type { JobQueue } from "../../src/engine/jobs.js";
import type { Leases } from "../../src/engine/leases.js";
import type { SubscriptionRegistry } from "../../src/engine/registry.js";

/**
 * The interface contracts. Each suite takes factories so that the Redis engine can run the same
 * assertions against a real Redis.
 */
export function busContract(name: string, makePair: () => Promise<[Bus, Bus]>): void {
  describe(`Bus contract: ${name}`, () => {
    const message = (uri: string): BusMessage => ({ kind: "resource.updated", v: 1, origin: "t", backendId: "b", key: uri, uri, at: 1, update: 1, keys: 1 });

    it("delivers to subscribed processes only, in publish order", async () => {
      const [a, b] = await makePair();
      const gotA: string[] = [];
      const gotB: string[] = [];
      a.onMessage((_c, m) => gotA.push(m.kind === "resource.updated" ? m.uri : ""));
      b.onMessage((_c, m) => gotB.push(m.kind === "resource.updated" ? m.uri : ""));
      await b.subscribe("ch");
      await a.publish("ch", message("1"));
      await a.publish("ch", message("2"));
      await a.publish("other", message("x"));
      await vi.waitFor(() => expect(gotB).toEqual(["1", "2"]));
      expect(gotA).toEqual([]);
      await a.close();
      await b.close();
    });

    it("stops delivering after unsubscribe and is idempotent per channel", async () => {
      const [a, b] = await makePair();
      const got: string[] = [];
      b.onMessage((_c, m) => got.push(m.kind));
      await b.subscribe("ch");
      await b.subscribe("ch");
      await a.publish("ch", message("1"));
      await vi.waitFor(() => expect(got).toHaveLength(1));
      await b.unsubscribe("ch");
      await a.publish("ch", message("2"));
      await a.publish("probe", message("3"));
      await b.subscribe("probe");
      await a.publish("probe", message("4"));
      await vi.waitFor(() => expect(got).toHaveLength(2));
      await a.close();
      await b.close();
    });
  });
}

export function registryContract(name: string, make: () => Promise<SubscriptionRegistry>): void {
  describe(`SubscriptionRegistry contract: ${name}`, () => {
    const limits = { perSession: 2, perPrincipal: 3, total: 4 };
    const ref = (principal: string, sessionId: string, uri: string) => ({ principal, sessionId, backendId: "b", uri });

    it("reports first and last exactly once per (backend, uri)", async () => {
      const registry = await make();
      expect(await registry.add(ref("p", "s1", "u"), limits)).toEqual({ status: "added", first: true });
      expect(await registry.add(ref("p", "s2", "u"), limits)).toEqual({ status: "added", first: false });
      expect(await registry.add(ref("p", "s1", "u"), limits)).toEqual({ status: "exists" });
      expect(await registry.count("b", "u")).toBe(2);
      expect(await registry.wanted("b")).toEqual(["u"]);
      expect(await registry.remove(ref("p", "s1", "u"))).toEqual({ removed: true, last: false });
      expect(await registry.remove(ref("p", "s1", "u"))).toEqual({ removed: false, last: false });
      expect(await registry.remove(ref("p", "s2", "u"))).toEqual({ removed: true, last: true });
      expect(await registry.wanted("b")).toEqual([]);
      await registry.close();
    });

    it("enforces session, principal and global limits, and frees them on remove", async () => {
      const registry = await make();
      await registry.add(ref("p", "s1", "a"), limits);
      await registry.add(ref("p", "s1", "b"), limits);
      expect(await registry.add(ref("p", "s1", "c"), limits)).toEqual({ status: "limit", limit: "session", max: 2 });
      await registry.add(ref("p", "s2", "c"), limits);
      expect(await registry.add(ref("p", "s3", "d"), limits)).toEqual({ status: "limit", limit: "principal", max: 3 });
      await registry.add(ref("q", "s4", "d"), limits);
      expect(await registry.add(ref("r", "s5", "e"), limits)).toEqual({ status: "limit", limit: "global", max: 4 });
      await registry.remove(ref("p", "s1", "a"));
      expect(await registry.add(ref("r", "s5", "e"), limits)).toEqual({ status: "added", first: true });
      await registry.close();
    });

    it("holds limits exactly under concurrent adds", async () => {
      const registry = await make();
      const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => registry.add(ref("p", "s", `u${i}`), { perSession: 5, perPrincipal: 100, total: 100 })));
      expect(outcomes.filter((o) => o.status === "added")).toHaveLength(5);
      expect(await registry.ofSession("p", "s")).toHaveLength(5);
      await registry.close();
    });

    it("keeps principals apart", async () => {
      const registry = await make();
      await registry.add(ref("p", "s", "u"), limits);
      expect(await registry.ofSession("q", "s")).toEqual([]);
      expect(await registry.ofSession("p", "s")).toEqual([ref("p", "s", "u")]);
      await registry.close();
    });
  });
}

/** `make` returns the leases and a way to let time pass (a fake clock, or real time for Redis). */
export function leasesContract(name: string, make: () => Promise<{ leases: Leases; elapse: (ms: number) => Promise<void> }>): void {
  describe(`Leases contract: ${name}`, () => {
    it("grants one holder at a time until expiry or release", async () => {
      const { leases, elapse } = await make();
      expect(await leases.acquire("backend:a", "w1", 200)).toBe(true);
      expect(await leases.acquire("backend:a", "w2", 200)).toBe(false);
      expect(await leases.acquire("backend:a", "w1", 200)).toBe(true);
      expect(await leases.renew("backend:a", "w1", 200)).toBe(true);
      expect(await leases.renew("backend:a", "w2", 200)).toBe(false);
      expect(await leases.holder("backend:a")).toBe("w1");
      await elapse(300);
      expect(await leases.holder("backend:a")).toBeUndefined();
      expect(await leases.renew("backend:a", "w1", 200)).toBe(false);
      expect(await leases.acquire("backend:a", "w2", 200)).toBe(true);
      await leases.release("backend:a", "w1");
      expect(await leases.holder("backend:a")).toBe("w2");
      await leases.release("backend:a", "w2");
      expect(await leases.holder("backend:a")).toBeUndefined();
      await leases.close();
    });
  });
}

export function jobQueueContract(name: string, make: () => Promise<JobQueue<number>>, advance: (ms: number) => Promise<void>): void {
  describe(`JobQueue contract: ${name}`, () => {
    it("coalesces a burst into one run and a schedule during a run into exactly one more", async () => {
      const queue = await make();
      const runs: number[] = [];
      let release: () => void = () => undefined;
      queue.process(async (_key, data) => {
        runs.push(data);
        if (runs.length === 1) await new Promise<void>((r) => (release = r));
      });
      for (let i = 1; i <= 10; i++) await queue.schedule("k", i, 1_000);
      await advance(999);
      expect(runs).toEqual([]);
      await advance(1);
      expect(runs).toEqual([1]);
      await queue.schedule("k", 11, 1_000);
      await queue.schedule("k", 12, 1_000);
      release();
      await advance(1_000);
      expect(runs).toEqual([1, 12]);
      await advance(5_000);
      expect(runs).toEqual([1, 12]);
      expect(await queue.pending()).toEqual([]);
      await queue.close();
    });

    it("keeps keys independent", async () => {
      const queue = await make();
      const runs: string[] = [];
      queue.process(async (key) => {
        runs.push(key);
      });
      await queue.schedule("a", 1, 10);
      await queue.schedule("b", 1, 10);
      await advance(10);
      expect(runs.sort()).toEqual(["a", "b"]);
      await queue.close();
    });
  });
}

