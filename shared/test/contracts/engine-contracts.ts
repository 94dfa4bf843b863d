import { describe, expect, it, vi } from "vitest";
import { CHANNEL, type Bus, type BusMessage } from "../../src/engine/bus.js";
import type { UpdateLog } from "../../src/engine/update-log.js";
import { MAX_NOTICES, type SessionStore } from "../../src/engine/session-store.js";
import type { CatalogStore, Positions } from "../../src/engine/catalog-store.js";
import { UnrecoverableJobError, type JobQueue, type JobQueueOptions } from "../../src/engine/jobs.js";
import type { Leases } from "../../src/engine/leases.js";
import type { SubscriptionRegistry } from "../../src/engine/registry.js";

/**
 * The interface contracts. Each suite takes factories so that the Redis engine can run the same
 * assertions against a real Redis.
 */
export function busContract(name: string, makePair: () => Promise<[Bus, Bus]>): void {
  describe(`Bus contract: ${name}`, () => {
    const message = (uri: string): BusMessage => ({ kind: "resource.updated", v: 1, origin: "t", backendId: "b", key: uri, uri, at: 1, update: 1, keys: 1, position: 1 });

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
      b.onMessage((channel, m) => got.push(`${channel} ${m.kind === "resource.updated" ? m.uri : ""}`));
      await b.subscribe("ch");
      await b.subscribe("ch");
      await a.publish("ch", message("1"));
      await vi.waitFor(() => expect(got).toEqual(["ch 1"]));
      await b.unsubscribe("ch");
      await a.publish("ch", message("2"));
      // A barrier: what was published on "ch" before it would have arrived before it. (On a Redis
      // Cluster a message published just before a subscribe may still arrive after it: "probe 3".)
      await a.publish("probe", message("3"));
      await b.subscribe("probe");
      await a.publish("probe", message("4"));
      await vi.waitFor(() => expect(got).toContain("probe 4"));
      expect(got.filter((entry) => entry.startsWith("ch "))).toEqual(["ch 1"]);
      await a.close();
      await b.close();
    });

    it("unsubscribes many channels left together, each from a timer of its own, and keeps one subscribed again before they go out", async () => {
      const [a, b] = await makePair();
      const got: string[] = [];
      b.onMessage((channel, m) => got.push(`${channel} ${m.kind === "resource.updated" ? m.uri : ""}`));
      const channels = Array.from({ length: 40 }, (_, i) => `ch${i}`);
      for (const channel of [...channels, "kept"]) await b.subscribe(channel);
      const left = await new Promise<Promise<void>[]>((resolve) => {
        const calls: Promise<void>[] = [];
        for (const channel of channels) setTimeout(() => calls.push(b.unsubscribe(channel)), 0);
        setTimeout(() => calls.push(b.unsubscribe("kept")), 0);
        setTimeout(() => {
          calls.push(b.subscribe("kept"));
          resolve(calls);
        }, 0);
      });
      await Promise.all(left);
      for (const channel of [...channels, "kept"]) await a.publish(channel, message("after"));
      // A barrier, as above.
      await a.publish("probe", message("1"));
      await b.subscribe("probe");
      await a.publish("probe", message("2"));
      await vi.waitFor(() => expect(got).toContain("probe 2"));
      expect(got.filter((entry) => !entry.startsWith("probe "))).toEqual(["kept after"]);
      await b.subscribe("ch0");
      await a.publish("ch0", message("again"));
      await vi.waitFor(() => expect(got).toContain("ch0 again"));
      await a.close();
      await b.close();
    });

    it("is subscribed after subscribe, unsubscribe, subscribe in a row, none awaited before the next", async () => {
      const [a, b] = await makePair();
      const got: string[] = [];
      b.onMessage((_c, m) => got.push(m.kind === "resource.updated" ? m.uri : ""));
      const first = b.subscribe("ch");
      const dropped = b.unsubscribe("ch");
      const again = b.subscribe("ch");
      await Promise.all([first, dropped, again]);
      await a.publish("ch", message("after"));
      await vi.waitFor(() => expect(got).toEqual(["after"]));
      await a.close();
      await b.close();
    });
  });
}

/** `corrupt` damages the registry's counts as a bug or a hand edit would: principal "p" counted 99, the total 7. */
export function registryContract(name: string, make: () => Promise<SubscriptionRegistry & { corrupt(): Promise<void> }>): void {
  describe(`SubscriptionRegistry contract: ${name}`, () => {
    const limits = { perSession: 2, perPrincipal: 3, total: 4 };
    const ref = (principal: string, sessionId: string, uri: string) => ({ principal, sessionId, backendId: "b", uri });

    it("reports first and last exactly once per (backend, uri)", async () => {
      const registry = await make();
      expect(await registry.add(ref("p", "s1", "u"), limits)).toEqual({ status: "added", first: true });
      expect(await registry.add(ref("p", "s2", "u"), limits)).toEqual({ status: "added", first: false });
      expect(await registry.add(ref("p", "s1", "u"), limits)).toEqual({ status: "exists" });
      expect(await registry.count("b", "u")).toBe(2);
      // The watcher's mark reads the same count (every engine; only the Redis one keeps the mark).
      expect(await registry.markWatched("b", "u")).toBe(2);
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

    it("adds several of one session in one step, in order, as adds one after another would", async () => {
      const registry = await make();
      await registry.add(ref("p", "other", "b"), limits);
      expect(await registry.addMany([], limits)).toEqual([]);
      expect(await registry.addMany([ref("p", "s1", "a"), ref("p", "s1", "a"), ref("p", "s1", "b"), ref("p", "s1", "c")], limits)).toEqual([
        { status: "added", first: true },
        { status: "exists" },
        { status: "added", first: false },
        { status: "limit", limit: "session", max: 2 },
      ]);
      expect(await registry.count("b", "b")).toBe(2);
      expect((await registry.ofSession("p", "s1")).map((r) => r.uri).sort()).toEqual(["a", "b"]);
      // The principal's and the global counts moved with them: one more for p, then the global limit.
      expect(await registry.addMany([ref("p", "s2", "d"), ref("p", "s2", "e")], limits)).toEqual([{ status: "limit", limit: "principal", max: 3 }, { status: "limit", limit: "principal", max: 3 }]);
      expect(await registry.addMany([ref("q", "s3", "d"), ref("q", "s3", "e")], limits)).toEqual([{ status: "added", first: true }, { status: "limit", limit: "global", max: 4 }]);
      expect((await registry.audit()).repairs).toEqual([]);
      // And removes them the same way: counts, last holders and the session's indexes.
      expect(await registry.removeMany([])).toEqual([]);
      expect(await registry.removeMany([ref("p", "s1", "a"), ref("p", "s1", "b"), ref("p", "s1", "never")])).toEqual([
        { removed: true, last: true },
        { removed: true, last: false },
        { removed: false, last: false },
      ]);
      expect(await registry.ofSession("p", "s1")).toEqual([]);
      expect(await registry.wanted("b")).toEqual(["b", "d"]);
      expect((await registry.audit()).repairs).toEqual([]);
      expect(await registry.addMany([ref("p", "s2", "d"), ref("p", "s2", "e")], limits)).toEqual([{ status: "added", first: false }, { status: "added", first: true }]);
      await registry.close();
    });

    it("takes any URI in a batch: quotes, backslashes, control characters, non-ASCII, a lone surrogate", async () => {
      const registry = await make();
      const wide = { perSession: 10, perPrincipal: 20, total: 20 };
      const uris = ['q"uote', "back\\slash", "tab\tnew\nline", "\u0001ctl", "ünï/😀", "lone\ud800"];
      expect(await registry.addMany(uris.map((uri) => ref("p", "s1", uri)), wide)).toEqual(uris.map(() => ({ status: "added", first: true })));
      expect(await registry.addMany(uris.map((uri) => ref("p", "s2", uri)), wide)).toEqual(uris.map(() => ({ status: "added", first: false })));
      expect((await registry.ofSession("p", "s1")).map((r) => r.uri)).toEqual(expect.arrayContaining(uris.slice(0, 5)));
      expect(await registry.removeMany(uris.map((uri) => ref("p", "s1", uri)))).toEqual(uris.map(() => ({ removed: true, last: false })));
      expect(await registry.removeMany(uris.map((uri) => ref("p", "s2", uri)))).toEqual(uris.map(() => ({ removed: true, last: true })));
      expect((await registry.audit()).repairs).toEqual([]);
      await registry.close();
    });

    it("holds limits exactly under concurrent adds", async () => {
      const registry = await make();
      const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => registry.add(ref("p", "s", `u${i}`), { perSession: 5, perPrincipal: 100, total: 100 })));
      expect(outcomes.filter((o) => o.status === "added")).toHaveLength(5);
      expect(await registry.ofSession("p", "s")).toHaveLength(5);
      await registry.close();
    });

    it("finds the newest holdings beyond lowered limits: per session, then per principal, then cluster-wide", async () => {
      const registry = await make();
      const roomy = { perSession: 100, perPrincipal: 100, total: 100 };
      for (const [principal, sessionId, uri] of [["p", "s1", "a"], ["p", "s1", "b"], ["p", "s1", "c"], ["p", "s2", "d"], ["p", "s2", "e"], ["q", "s3", "f"]] as const) {
        await registry.add(ref(principal, sessionId, uri), roomy);
      }
      const lowered = { perSession: 2, perPrincipal: 3, total: 3 };
      const beyond = await registry.beyond(lowered);
      expect(beyond).toEqual([
        { ref: ref("p", "s1", "c"), limit: "session", max: 2 },
        { ref: ref("p", "s2", "e"), limit: "principal", max: 3 },
        { ref: ref("q", "s3", "f"), limit: "global", max: 3 },
      ]);
      for (const { ref: extra } of beyond) await registry.remove(extra);
      expect(await registry.beyond(lowered)).toEqual([]);
      expect((await registry.audit()).repairs).toEqual([]);
      await registry.close();
    });

    it("recounts drifted counts from the sessions' holdings and repairs them, so limits hold again", async () => {
      const registry = await make();
      await registry.add(ref("p", "s1", "a"), limits);
      await registry.add(ref("p", "s2", "b"), limits);
      await registry.add(ref("q", "s3", "c"), limits);
      await registry.corrupt();
      expect(await registry.add(ref("p", "s2", "x"), limits)).toEqual({ status: "limit", limit: "principal", max: 3 });
      const report = await registry.audit();
      expect(report.repairs).toEqual(
        expect.arrayContaining([
          { scope: "principal", principal: "p", was: 99, now: 2 },
          { scope: "total", was: expect.any(Number), now: 3 },
        ]),
      );
      expect(report).toMatchObject({ total: 3, largestPrincipal: 2, largestSession: 1 });
      expect(await registry.add(ref("p", "s2", "x"), limits)).toEqual({ status: "added", first: true });
      expect((await registry.audit()).repairs).toEqual([]);
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

/**
 * What the job queue contract needs of its time: `make` builds a fresh queue; `until` resolves once
 * `predicate` holds, letting time pass (fake timers for the memory queue, real time for Redis).
 */
export interface JobQueueHarness {
  make(options?: Partial<JobQueueOptions>): Promise<JobQueue<number>>;
  until(predicate: () => boolean | Promise<boolean>, what: string): Promise<void>;
  /** Lets `ms` pass (only to show that something does not happen). */
  elapse(ms: number): Promise<void>;
  now(): number;
}

export function jobQueueContract(name: string, harness: JobQueueHarness): void {
  describe(`JobQueue contract: ${name}`, () => {
    const idle = async (queue: JobQueue<number>) => (await queue.pending()).length === 0;

    it("coalesces a burst into one run", async () => {
      const queue = await harness.make();
      const runs: number[] = [];
      queue.process(async (_key, data) => {
        runs.push(data);
      });
      // The window outlasts the burst (ten round trips; on a loaded machine and a Redis Cluster,
      // ten of them once took over 500 ms in CI, and a second run followed): one run.
      for (let i = 1; i <= 10; i++) await queue.schedule("k", i, 2_000);
      await harness.until(async () => runs.length > 0 && (await idle(queue)), "the burst's run");
      expect(runs).toEqual([1]);
      await queue.close();
    });

    it("runs a key scheduled while it runs exactly once more, after the run, with the newest data, and never two at once", async () => {
      const queue = await harness.make();
      const runs: [string, number][] = [];
      let running = 0;
      let mostAtOnce = 0;
      let release: () => void = () => undefined;
      const blocked = new Promise<void>((resolve) => (release = resolve));
      queue.process(async (key, data) => {
        runs.push([key, data]);
        if (key !== "k") return;
        mostAtOnce = Math.max(mostAtOnce, ++running);
        if (data === 1) await blocked;
        running--;
      });
      await queue.schedule("k", 1, 10);
      await harness.until(() => runs.length === 1, "the first run");
      await queue.schedule("k", 11, 10);
      await queue.schedule("k", 12, 10);
      // Another key runs meanwhile: the queue took jobs, and none of them was k's next run.
      await queue.schedule("other", 0, 10);
      await harness.until(() => runs.some(([key]) => key === "other"), "another key's run");
      expect(runs.filter(([key]) => key === "k")).toEqual([["k", 1]]);
      release();
      await harness.until(async () => runs.length === 3 && (await idle(queue)), "the one more run");
      expect(runs.filter(([key]) => key === "k")).toEqual([["k", 1], ["k", 12]]);
      expect(mostAtOnce).toBe(1);
      await queue.close();
    });

    it("keeps keys independent", async () => {
      const queue = await harness.make();
      const runs: string[] = [];
      queue.process(async (key) => {
        runs.push(key);
      });
      await queue.schedule("a", 1, 10);
      await queue.schedule("b", 1, 10);
      await harness.until(() => runs.length === 2, "both keys' runs");
      expect(runs.sort()).toEqual(["a", "b"]);
      await queue.close();
    });

    it("retries a failing run with exponential backoff until it succeeds", async () => {
      const queue = await harness.make({ attempts: 3, backoffMs: 50 });
      const at: number[] = [];
      queue.process(async () => {
        at.push(harness.now());
        if (at.length < 3) throw new Error("not yet");
      });
      await queue.schedule("k", 1, 0);
      await harness.until(async () => at.length === 3 && (await idle(queue)), "three runs");
      const [first = 0, second = 0, third = 0] = at;
      expect(second - first).toBeGreaterThanOrEqual(50);
      expect(third - second).toBeGreaterThanOrEqual(100);
      expect((await queue.stats()).failed).toBe(0);
      await queue.close();
    });

    it("brings a retry waiting out its backoff forward when the key is scheduled again, with the newest data", async () => {
      const queue = await harness.make({ attempts: 5, backoffMs: 5_000 });
      const runs: { data: number; at: number }[] = [];
      queue.process(async (_key, data) => {
        runs.push({ data, at: harness.now() });
        if (data === 1) throw new Error("the backend answered garbage");
      });
      await queue.schedule("k", 1, 0);
      await harness.until(() => runs.length === 1, "the failing run");
      // Its retry waits 5 s; the key is scheduled again (the backend changed meanwhile): that runs after its own delay.
      const scheduled = harness.now();
      await queue.schedule("k", 2, 20);
      await harness.until(async () => runs.length === 2 && (await idle(queue)), "the run brought forward");
      expect(runs[1]?.data).toBe(2);
      expect((runs[1]?.at ?? 0) - scheduled).toBeLessThan(4_000);
      expect((await queue.stats()).failed).toBe(0);
      await queue.close();
    });

    it("fails a run for good after its attempts, and at once on an unrecoverable error", async () => {
      const queue = await harness.make({ attempts: 2, backoffMs: 10 });
      const runs: string[] = [];
      queue.process(async (key) => {
        runs.push(key);
        throw key === "bad" ? new UnrecoverableJobError("never works") : new Error("fails");
      });
      await queue.schedule("bad", 1, 0);
      await queue.schedule("flaky", 1, 0);
      await harness.until(async () => (await queue.stats()).failed === 2, "both jobs failed");
      expect(runs.sort()).toEqual(["bad", "flaky", "flaky"]);
      expect(await queue.pending()).toEqual([]);
      await queue.close();
    });

    it("repeats a key until the repetition stops", async () => {
      const queue = await harness.make();
      const runs: number[] = [];
      queue.process(async (_key, data) => {
        runs.push(data);
      });
      await queue.repeat("r", 7, 100);
      await queue.repeat("r", 8, 100); // replaces the first (whose first run may have started): one repetition per key
      await harness.until(() => runs.filter((data) => data === 8).length >= 2, "two repeated runs");
      expect(runs.filter((data) => data === 7).length).toBeLessThanOrEqual(1);
      await queue.stopRepeat("r");
      // A repetition that had already started (or was due) when it stopped still runs: wait for it too.
      await harness.until(async () => {
        const stats = await queue.stats();
        return stats.active + stats.waiting + stats.delayed === 0;
      }, "the last run");
      const seen = runs.length;
      await harness.elapse(350);
      expect(runs).toHaveLength(seen);
      await queue.close();
    });
  });
}

/** `make` gives a store and a bus of another member of the same cluster. */
export function catalogStoreContract(name: string, make: () => Promise<{ store: CatalogStore & Pick<Positions, "current">; bus: Bus }>): void {
  describe(`CatalogStore contract: ${name}`, () => {
    const tools = (n: number) => ({ items: Array.from({ length: n }, (_, i) => ({ name: `t${i}`, inputSchema: { type: "object" } })) });

    it("stores versions one after another, each at a new cluster position, per backend and kind", async () => {
      const { store } = await make();
      expect(await store.get("b", "tools")).toBeUndefined();
      const [first] = (await store.put("b", [{ kind: "tools", expected: 0, body: tools(1) }], "me")) ?? [];
      expect(first).toMatchObject({ version: 1, items: tools(1).items });
      const gated = { ...tools(2), gate: { pins: { t0: "h" }, held: [{ backendId: "b", name: "t1", hash: "h1" }] } };
      const [second] = (await store.put("b", [{ kind: "tools", expected: 1, body: gated }], "me")) ?? [];
      expect(second).toMatchObject({ version: 2 });
      expect(second!.position).toBeGreaterThan(first!.position);
      expect(await store.current()).toBe(second!.position);
      expect(await store.get("b", "tools")).toEqual(second);
      expect(await store.get("b", "prompts")).toBeUndefined();
      expect(await store.get("other", "tools")).toBeUndefined();
      await store.close();
    });

    it("stores several kinds all or none, at one position; refuses a put over a version it did not compare against", async () => {
      const { store } = await make();
      await store.put("b", [{ kind: "resources", expected: 0, body: { items: [{ uri: "x://a" }] } }], "me");
      const both = await store.put(
        "b",
        [
          { kind: "resources", expected: 1, body: { items: [{ uri: "x://b" }] } },
          { kind: "resourceTemplates", expected: 0, body: { items: [{ uriTemplate: "x://{id}" }] } },
        ],
        "me",
      );
      expect(both?.map((list) => list.version)).toEqual([2, 1]);
      expect(both?.[0]?.position).toBe(both?.[1]?.position);
      // A racing writer compared against version 1: nothing of its put is stored.
      const stale = await store.put(
        "b",
        [
          { kind: "resourceTemplates", expected: 1, body: { items: [] } },
          { kind: "resources", expected: 1, body: { items: [] } },
        ],
        "me",
      );
      expect(stale).toBeUndefined();
      expect((await store.get("b", "resourceTemplates"))?.version).toBe(1);
      const racing = await Promise.all([
        store.put("b", [{ kind: "resources", expected: 2, body: { items: [{ uri: "x://c" }] } }], "me"),
        store.put("b", [{ kind: "resources", expected: 2, body: { items: [{ uri: "x://d" }] } }], "me"),
      ]);
      expect(racing.filter((o) => o !== undefined)).toHaveLength(1);
      expect((await store.get("b", "resources"))?.version).toBe(3);
      await store.close();
    });

    it("announces what it stores in the same step, with the bodies, versions and position; a refused put announces nothing", async () => {
      const { store, bus } = await make();
      const got: BusMessage[] = [];
      bus.onMessage((_channel, message) => got.push(message));
      await bus.subscribe(CHANNEL.catalog);
      const [stored] = (await store.put("b", [{ kind: "prompts", expected: 0, body: { items: [{ name: "p" }] } }], "me")) ?? [];
      expect(await store.put("b", [{ kind: "prompts", expected: 0, body: { items: [] } }], "me")).toBeUndefined();
      await store.put("b", [{ kind: "prompts", expected: 1, body: { items: [] } }], "me");
      await vi.waitFor(() => expect(got).toHaveLength(2));
      expect(got[0]).toEqual({ kind: "catalog.changed", v: 1, origin: "me", backendId: "b", lists: [{ kind: "prompts", body: { items: [{ name: "p" }] }, version: 1 }], position: stored!.position });
      expect(got[1]).toMatchObject({ lists: [{ kind: "prompts", body: { items: [] }, version: 2 }] });
      await store.close();
    });

    it("hands out copies: changing what it returned changes nothing stored", async () => {
      const { store } = await make();
      const body = tools(1);
      await store.put("b", [{ kind: "tools", expected: 0, body }], "me");
      body.items.push({ name: "late", inputSchema: { type: "object" } });
      const got = await store.get("b", "tools");
      got?.items.push({ name: "later", inputSchema: { type: "object" } });
      expect((await store.get("b", "tools"))?.items).toEqual(tools(1).items);
      await store.close();
    });
  });
}

/** `make` gives an update log and a bus of another member of the same cluster, and the cluster's catalog store. */
export function updateLogContract(name: string, make: () => Promise<{ log: UpdateLog; bus: Bus; store: CatalogStore }>): void {
  describe(`UpdateLog contract: ${name}`, () => {
    const update = (uri: string) => ({ kind: "resource.updated" as const, v: 1 as const, origin: "w", backendId: "b", uri, at: 1, update: 1 });

    it("publishes an update under each of its keys at one new position, and stamps the watched keys with it", async () => {
      const { log, bus, store } = await make();
      const got: BusMessage[] = [];
      bus.onMessage((_channel, message) => got.push(message));
      await bus.subscribe(CHANNEL.resource("b", "x"));
      await bus.subscribe(CHANNEL.resource("b", "x/y"));
      await log.watched("b", "x");
      await log.watched("b", "x/y");
      const since = await log.current();
      const first = await log.publish(update("x/y/z"), ["x/y", "x"]);
      const [listed] = (await store.put("b", [{ kind: "tools", expected: 0, body: { items: [] } }], "me")) ?? [];
      const second = await log.publish(update("x"), ["x"]);
      expect(first).toBeGreaterThan(since);
      expect(listed!.position).toBeGreaterThan(first);
      expect(second).toBeGreaterThan(listed!.position);
      expect(await log.current()).toBe(second);
      await vi.waitFor(() => expect(got).toHaveLength(3));
      expect(got).toEqual([
        { ...update("x/y/z"), key: "x/y", keys: 2, position: first },
        { ...update("x/y/z"), key: "x", keys: 2, position: first },
        { ...update("x"), key: "x", keys: 1, position: second },
      ]);
      expect(await log.stamps("b", ["x", "x/y", "never"])).toEqual([
        { updated: second, since },
        { updated: first, since },
        { updated: 0, since: undefined },
      ]);
    });

    it("keeps the time of each watched key's last update, and forgets it with the watch", async () => {
      const { log } = await make();
      await log.watched("b", "x");
      await log.watched("b", "x/y");
      expect(await log.updatedAt("b", ["x", "x/y"])).toEqual([undefined, undefined]);
      await log.publish({ ...update("x/y/z"), at: 1_000 }, ["x/y", "x"]);
      await log.publish({ ...update("x"), at: 2_000 }, ["x"]);
      expect(await log.updatedAt("b", ["x", "x/y", "never"])).toEqual([2_000, 1_000, undefined]);
      await log.unwatched("b", "x");
      await log.watched("b", "x/y");
      expect(await log.updatedAt("b", ["x", "x/y"])).toEqual([undefined, undefined]);
    });

    it("gives updates published in one tick, of several backends, consecutive positions in call order, and delivers them in that order", async () => {
      const { log, bus } = await make();
      const got: BusMessage[] = [];
      bus.onMessage((_channel, message) => got.push(message));
      await bus.subscribe(CHANNEL.resource("b", "k"));
      await bus.subscribe(CHANNEL.resource("c", "k"));
      await log.watched("b", "k");
      await log.watched("c", "k");
      const other = { ...update("k"), backendId: "c" };
      const positions = await Promise.all([log.publish(update("k"), ["k"]), log.publish(other, ["k"]), log.publish(update("k"), ["k"])]);
      expect(positions).toEqual([positions[0], positions[0] + 1, positions[0] + 2]);
      await vi.waitFor(() => expect(got).toHaveLength(3));
      expect(got.map((message) => [(message as { backendId: string }).backendId, (message as { position: number }).position])).toEqual([
        ["b", positions[0]],
        ["c", positions[1]],
        ["b", positions[2]],
      ]);
      expect(await log.stamps("c", ["k"])).toEqual([{ updated: positions[1], since: expect.any(Number) }]);
      expect(await log.stamps("b", ["k"])).toEqual([{ updated: positions[2], since: expect.any(Number) }]);
    });

    it("reserves a position of its own: after every watch begun before it, before every update published and watch begun after it", async () => {
      const { log } = await make();
      await log.watched("b", "before");
      const reserved = await log.reserve();
      expect(reserved).toBe(await log.current());
      const published = await log.publish(update("before"), ["before"]);
      await log.watched("b", "after");
      const [before, after] = await log.stamps("b", ["before", "after"]);
      expect(before!.since).toBeLessThan(reserved);
      expect(published).toBeGreaterThan(reserved);
      expect(after!.since).toBeGreaterThanOrEqual(reserved);
      await log.raiseTo(reserved + 1_000);
      expect(await log.reserve()).toBe(reserved + 1_001);
    });

    it("publishes a reservation's mark with its position in the same step: a subscriber gets it after every message published before", async () => {
      const { log, bus } = await make();
      const got: BusMessage[] = [];
      bus.onMessage((_channel, message) => got.push(message));
      await bus.subscribe(CHANNEL.resource("b", "k"));
      await bus.subscribe(CHANNEL.replies("me"));
      await log.watched("b", "k");
      // Still on their way when the position is reserved.
      const published = Promise.all([log.publish(update("k"), ["k"]), log.publish(update("k"), ["k"])]);
      const reserved = await log.reserve({ channel: CHANNEL.replies("me"), message: { kind: "bus.barrier", v: 1, origin: "me", id: 7 } });
      expect(reserved).toBeGreaterThan(Math.max(...(await published)));
      await vi.waitFor(() => expect(got).toHaveLength(3));
      expect(got.map((message) => message.kind)).toEqual(["resource.updated", "resource.updated", "bus.barrier"]);
      expect(got[2]).toEqual({ kind: "bus.barrier", v: 1, origin: "me", id: 7, position: reserved });
    });

    it("goes on from at least a raised floor, and never back", async () => {
      const { log } = await make();
      const now = await log.current();
      await log.raiseTo(now + 1_000);
      expect(await log.publish(update("k"), ["k"])).toBe(now + 1_001);
      await log.raiseTo(5);
      expect(await log.current()).toBe(now + 1_001);
    });

    it("forgets a key's stamps when its watch ends, and what came before a new watch", async () => {
      const { log } = await make();
      await log.watched("b", "k");
      await log.publish(update("k"), ["k"]);
      await log.unwatched("b", "k");
      expect(await log.stamps("b", ["k"])).toEqual([{ updated: 0, since: undefined }]);
      await log.publish(update("k"), ["k"]);
      const since = await log.current();
      await log.watched("b", "k");
      expect(await log.stamps("b", ["k"])).toEqual([{ updated: 0, since }]);
    });
  });
}

/** `make` gives a store and a way to let time pass (fake for memory, real for Redis). */
/** `claim`: the cluster's claim on a dead member, which fences `orphan` (see `SubscriptionRegistry.claimInstance`); none for one process. */
export function sessionStoreContract(name: string, make: () => Promise<{ store: SessionStore; elapse: (ms: number) => Promise<void>; claim?: (owner: string) => Promise<void> }>): void {
  describe(`SessionStore contract: ${name}`, () => {
    const session = (sessionId: string, principal = "p") => ({ sessionId, principal, protocolVersion: "2025-11-25", clientInfo: { name: "c", version: "1" }, capabilities: { roots: {} } });

    it("keeps a record bound to its principal, with what initialize negotiated and the log level", async () => {
      const { store } = await make();
      await store.create(session("s1"), "m1", 1_000);
      expect(await store.get({ principal: "p", sessionId: "s1" })).toEqual({ ...session("s1"), owner: "m1", epoch: 1, lastSeen: 1_000 });
      expect(await store.get({ principal: "q", sessionId: "s1" })).toBeUndefined();
      await store.setLogLevel({ principal: "p", sessionId: "s1" }, "debug");
      await store.touch({ principal: "p", sessionId: "s1" }, 2_000);
      expect(await store.get({ principal: "p", sessionId: "s1" })).toMatchObject({ logLevel: "debug", lastSeen: 2_000 });
      // Touching what does not exist creates nothing.
      await store.touch({ principal: "p", sessionId: "nope" }, 3_000);
      expect(await store.get({ principal: "p", sessionId: "nope" })).toBeUndefined();
      await store.delete({ principal: "p", sessionId: "s1" });
      expect(await store.get({ principal: "p", sessionId: "s1" })).toBeUndefined();
      // Written again after Redis lost it: with the epoch its holder has.
      await store.create(session("s2"), "m1", 5, 7);
      expect(await store.get({ principal: "p", sessionId: "s2" })).toMatchObject({ owner: "m1", epoch: 7 });
      await store.close();
    });

    it("moves a session to whoever adopts it, with a growing epoch, naming the previous holder; adopts nothing that does not exist", async () => {
      const { store } = await make();
      await store.create(session("s1"), "m1", 1);
      const byM2 = await store.adopt({ principal: "p", sessionId: "s1" }, "m2", 2);
      expect(byM2).toMatchObject({ previous: "m1", record: { owner: "m2", epoch: 2 } });
      const byM2Again = await store.adopt({ principal: "p", sessionId: "s1" }, "m2", 3);
      expect(byM2Again).toMatchObject({ previous: undefined, record: { epoch: 3 } });
      const racing = await Promise.all([store.adopt({ principal: "p", sessionId: "s1" }, "m3", 4), store.adopt({ principal: "p", sessionId: "s1" }, "m4", 4)]);
      expect(racing.map((r) => r?.record.epoch).sort()).toEqual([4, 5]);
      const last = racing.find((r) => r?.record.epoch === 5);
      expect((await store.get({ principal: "p", sessionId: "s1" }))?.owner).toBe(last?.record.owner);
      expect(await store.adopt({ principal: "p", sessionId: "never" }, "m1", 5)).toBeUndefined();
      expect(await store.adopt({ principal: "q", sessionId: "s1" }, "m1", 5)).toBeUndefined();
      await store.close();
    });

    it("keeps notices for the next holder of a session nobody holds (in order, at most MAX_NOTICES), none for a held one", async () => {
      const { store } = await make();
      const key = { principal: "p", sessionId: "s1" };
      await store.create(session("s1"), "m1", 1);
      expect(await store.remind(key, "held")).toBe(false);
      expect(await store.remind({ principal: "p", sessionId: "never" }, "x")).toBe(false);
      await store.letGo(key, "m1", 1, 60_000);
      for (let i = 0; i < MAX_NOTICES + 2; i++) expect(await store.remind(key, `n${i}`)).toBe(true);
      const adopted = await store.adopt(key, "m2", 2);
      expect(adopted?.notices).toEqual(Array.from({ length: MAX_NOTICES }, (_, i) => `n${i + 2}`));
      // Told once: the next adoption finds none.
      expect((await store.adopt(key, "m3", 3))?.notices).toEqual([]);
      await store.close();
    });

    it("expires a session let go, or orphaned by its holder's death, unless adopted in time; reports each expiry again until its release is marked", async () => {
      const { store, elapse, claim } = await make();
      await store.create(session("kept"), "m1", 1);
      await store.create(session("lost"), "m1", 1);
      await store.create(session("dead1"), "dead", 1);
      await store.create(session("dead2"), "dead", 1);
      const kept = await store.get({ principal: "p", sessionId: "kept" });
      await store.letGo({ principal: "p", sessionId: "kept" }, "m1", kept!.epoch, 300);
      await store.letGo({ principal: "p", sessionId: "lost" }, "m1", 1, 300);
      // A stale epoch lets nothing go (another member holds it by now).
      await store.letGo({ principal: "p", sessionId: "kept" }, "m1", kept!.epoch + 5, 10);
      await claim?.("dead");
      expect((await store.orphan("dead", 300)).map((k) => k.sessionId).sort()).toEqual(["dead1", "dead2"]);
      expect(await store.get({ principal: "p", sessionId: "lost" })).toMatchObject({ owner: "" });
      await store.adopt({ principal: "p", sessionId: "kept" }, "m2", 2);
      await store.adopt({ principal: "p", sessionId: "dead2" }, "m2", 2);
      expect(await store.expired(Date.now(), 200)).toEqual([]);
      await elapse(400);
      expect((await store.expired(Date.now() + 400, 200)).map((k) => k.sessionId).sort()).toEqual(["dead1", "lost"]);
      expect(await store.expired(Date.now() + 400, 200)).toEqual([]);
      // A release cut short is not forgotten: what was not marked released comes back after the retry time.
      await store.released({ principal: "p", sessionId: "lost" });
      await elapse(250);
      expect((await store.expired(Date.now() + 650, 200)).map((k) => k.sessionId)).toEqual(["dead1"]);
      await store.released({ principal: "p", sessionId: "dead1" });
      await elapse(250);
      expect(await store.expired(Date.now() + 900, 200)).toEqual([]);
      expect(await store.get({ principal: "p", sessionId: "lost" })).toBeUndefined();
      expect(await store.get({ principal: "p", sessionId: "kept" })).toMatchObject({ owner: "m2" });
      expect(await store.get({ principal: "p", sessionId: "dead2" })).toMatchObject({ owner: "m2" });
      await store.close();
    });
  });
}
