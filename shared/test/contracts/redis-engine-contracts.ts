import { describe, expect, it, vi } from "vitest";
import type { RedisEngine } from "../../src/engine/redis/redis-engine.js";
import type { BullJobQueueOptions } from "../../src/engine/redis/bullmq-job-queue.js";
import type { JobQueue } from "../../src/engine/jobs.js";
import { CHANNEL } from "../../src/engine/bus.js";
import { busContract, catalogStoreContract, jobQueueContract, leasesContract, registryContract, sessionStoreContract, updateLogContract } from "./engine-contracts.js";

type QueueOptions = Partial<Omit<BullJobQueueOptions<number>, "connect" | "prefix" | "name">>;

/**
 * Every engine contract on Redis engines that `members(n)` makes (n engines sharing one fresh
 * prefix: one cluster, as separate processes would see it), on one Redis or on a Redis Cluster.
 * `jobQueue` makes a queue of its own (fresh prefix and name).
 */
export function redisEngineContracts(name: string, members: (n: number) => Promise<RedisEngine[]>, jobQueue: (options: QueueOptions) => Promise<JobQueue<number>>): void {
  const elapse = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
  busContract(name, async () => {
    const [a, b] = await members(2);
    return [a!.bus, b!.bus];
  });
  registryContract(name, async () => {
    const [engine] = await members(1);
    return Object.assign(engine!.registry, {
      async corrupt() {
        await engine!.redis.hset(engine!.keys.principalCounts(), "p", 99);
        await engine!.redis.set(engine!.keys.total(), 7);
      },
    });
  });
  catalogStoreContract(name, async () => {
    const [a, b] = await members(2);
    return { store: a!.catalog, bus: b!.bus };
  });
  sessionStoreContract(name, async () => {
    const [member] = await members(1);
    return { store: member!.sessions, elapse, claim: async (owner) => void (await member!.registry.claimInstance(owner)) };
  });
  updateLogContract(name, async () => {
    const [a, b] = await members(2);
    return { log: a!.updates, bus: b!.bus, store: a!.catalog };
  });
  leasesContract(name, async () => ({ leases: (await members(1))[0]!.leases, elapse }));

  describe(`Redis leases: ${name}`, () => {
    // A member is alive while its bus listens on its replies channel (its connections are open).
    it("hands a lease over before it expires once its holder missed a renewal and its bus connection closed", async () => {
      const [a, b] = await members(2);
      await a!.bus.subscribe(CHANNEL.replies("a"));
      expect(await a!.leases.acquire("backend:x", "a", 1_000)).toBe(true);
      // Alive, and renewing: nobody else takes it.
      expect(await b!.leases.acquire("backend:x", "b", 1_000)).toBe(false);
      await elapse(600);
      // A renewal missed (a stall), but its connection is there: it keeps the lease.
      expect(await b!.leases.acquire("backend:x", "b", 1_000)).toBe(false);
      expect(await a!.leases.renew("backend:x", "a", 1_000)).toBe(true);
      // Its connections close (SIGKILL): once it has missed a renewal, the lease goes to b.
      await a!.bus.unsubscribe(CHANNEL.replies("a"));
      expect(await b!.leases.acquire("backend:x", "b", 1_000)).toBe(false);
      await elapse(600);
      // A member that asks for free leases only (it just started) leaves it to the others.
      expect(await b!.leases.acquire("backend:x", "b", 1_000, { takeOver: false })).toBe(false);
      expect(await b!.leases.acquire("backend:x", "b", 1_000)).toBe(true);
      expect(await b!.leases.holder("backend:x")).toBe("b");
      expect(await a!.leases.renew("backend:x", "a", 1_000)).toBe(false);
    });

    it("keeps a lease that lapsed while its holder stalled for that holder, alive, for three TTLs; one that is gone, or gave it up, leaves it free", async () => {
      const [a, b] = await members(2);
      await a!.bus.subscribe(CHANNEL.replies("a"));
      expect(await a!.leases.acquire("backend:s", "a", 300)).toBe(true);
      await elapse(450); // no renewal: the lease lapsed
      expect(await b!.leases.acquire("backend:s", "b", 300)).toBe(false);
      // The stalled holder is still the one to ask (it answers once it wakes), and it takes the lease back.
      expect(await b!.leases.holder("backend:s")).toBe("a");
      expect(await a!.leases.renew("backend:s", "a", 300)).toBe(false);
      expect(await a!.leases.acquire("backend:s", "a", 300)).toBe(true);
      // Stalled past three TTLs: the lease goes.
      await elapse(1_000);
      expect(await b!.leases.holder("backend:s")).toBeUndefined();
      expect(await b!.leases.acquire("backend:s", "b", 300)).toBe(true);
      // A holder that gave the lease up has no claim left; nor has one whose connections closed.
      await b!.leases.release("backend:s", "b");
      expect(await a!.leases.acquire("backend:s", "a", 300)).toBe(true);
      await a!.bus.unsubscribe(CHANNEL.replies("a"));
      await elapse(450);
      expect(await b!.leases.holder("backend:s")).toBeUndefined();
      expect(await b!.leases.acquire("backend:s", "b", 300, { takeOver: false })).toBe(true);
    });
  });
  describe(`Watch marks: ${name}`, () => {
    const limits = { perSession: 10, perPrincipal: 10, total: 10 };
    const ref = (sessionId: string) => ({ principal: "p", sessionId, backendId: "b", uri: "u" });

    it("tells a subscribe that is not the first when the watcher marked the resource watched, until a release finds nobody subscribed", async () => {
      const [a, b] = await members(2);
      const [registry, watcher] = [a!.registry, b!.registry];
      expect(await registry.add(ref("s1"), limits)).toEqual({ status: "added", first: true });
      // Not marked yet (the first subscriber's watch is on its way): the watcher is to be asked.
      expect(await registry.add(ref("s2"), limits)).toEqual({ status: "added", first: false });
      // The mark answers the subscriber count of the same moment (the watcher's check that someone still wants it).
      expect(await watcher.markWatched("b", "u")).toBe(2);
      expect(await registry.add(ref("s3"), limits)).toEqual({ status: "added", first: false, watched: true });
      // Subscribed still: the release check keeps the watch, and the mark.
      await registry.remove(ref("s1"));
      await registry.remove(ref("s2"));
      expect(await watcher.unwatch("b", "u")).toBe(false);
      expect(await registry.add(ref("s4"), limits)).toEqual({ status: "added", first: false, watched: true });
      await registry.remove(ref("s3"));
      expect(await registry.remove(ref("s4"))).toEqual({ removed: true, last: true });
      expect(await watcher.unwatch("b", "u")).toBe(true);
      // Released: the next subscribe is the first, and the one after it finds no mark.
      expect(await registry.add(ref("s5"), limits)).toEqual({ status: "added", first: true });
      expect(await registry.add(ref("s6"), limits)).toEqual({ status: "added", first: false });
    });

    it("marks the adds of several of one session the same way, and refuses them all for a session held at another epoch", async () => {
      const [engine] = await members(1);
      const registry = engine!.registry;
      await registry.add(ref("s1"), limits);
      await registry.markWatched("b", "u");
      const other = { principal: "p", sessionId: "s2", backendId: "c", uri: "v" };
      expect(await registry.addMany([ref("s2"), other], limits)).toEqual([{ status: "added", first: false, watched: true }, { status: "added", first: true }]);
      await engine!.sessions.create({ sessionId: "s3", principal: "p", protocolVersion: "2025-11-25" }, "me", Date.now());
      expect(await registry.addMany([{ ...ref("s3"), epoch: 2 }, { ...other, sessionId: "s3", epoch: 2 }], limits)).toEqual([{ status: "moved" }, { status: "moved" }]);
      expect(await registry.ofSession("p", "s3")).toEqual([]);
      // Removes are fenced the same way: what the session holds stays with its holder.
      expect(await registry.addMany([{ ...ref("s3"), epoch: 1 }], limits)).toEqual([{ status: "added", first: false, watched: true }]);
      expect(await registry.removeMany([{ ...ref("s3"), epoch: 2 }])).toEqual([{ removed: false, last: false, moved: true }]);
      expect(await registry.removeMany([{ ...ref("s3"), epoch: 1 }])).toEqual([{ removed: true, last: false }]);
    });

    it("has the first subscribe remove a mark left over, so the one after it asks the watcher too", async () => {
      const [engine] = await members(1);
      expect(await engine!.registry.markWatched("b", "u")).toBe(0); // a watch marked, then released while no watcher ran
      expect(await engine!.registry.add(ref("s1"), limits)).toEqual({ status: "added", first: true });
      expect(await engine!.registry.add(ref("s2"), limits)).toEqual({ status: "added", first: false });
      await engine!.registry.markWatched("b", "u"); // the watcher, asked by s1, watches it
      expect(await engine!.registry.add(ref("s3"), limits)).toEqual({ status: "added", first: false, watched: true });
    });
  });
  describe(`Redis session store: ${name}`, () => {
    // Redis's PTTL says 0 during the millisecond a key expires in (the key still exists until that
    // millisecond is over). A reap that looked then took the session for an adopted one (no TTL),
    // dropped it from the orphans, and what it held stayed held for good.
    it("reports a let-go session whose record expires in the very millisecond the reap looks", async () => {
      const [engine] = await members(1);
      const store = engine!.sessions;
      const ids = Array.from({ length: 20 }, (_, i) => `s${i}`);
      for (const [i, id] of ids.entries()) {
        await store.create({ sessionId: id, principal: "p", protocolVersion: "2025-11-25" }, "m1", 1);
        // Each expires in a millisecond of its own.
        await store.letGo({ principal: "p", sessionId: id }, "m1", 1, 100 + 3 * i);
      }
      // Asked back to back, so that it looks during most of those milliseconds (taken for adopted
      // there, half or more of them were lost). Reported once each: the retry outlasts the loop.
      const reported = new Set<string>();
      const bound = Date.now() + 5_000;
      while (reported.size < ids.length && Date.now() < bound) {
        for (const key of await store.expired(Date.now(), 60_000)) reported.add(key.sessionId);
      }
      expect([...reported].sort()).toEqual([...ids].sort());
      for (const id of ids) expect(await store.get({ principal: "p", sessionId: id })).toBeUndefined();
    });
  });
  jobQueueContract(`${name} (BullMQ)`, {
    make: jobQueue,
    until: (predicate, what) => vi.waitFor(async () => expect(await predicate(), what).toBe(true), { timeout: 15_000, interval: 20 }),
    elapse,
    now: () => Date.now(),
  });
}
