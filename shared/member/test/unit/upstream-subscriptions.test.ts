import type { McpSubscription, SubscriptionFilter } from "@modelcontextprotocol/client";
import { BrokerError, CHANNEL, MemoryBus, MemoryPositions, MemoryRegistry, MemoryUpdateLog, type Clock, type SubscriptionRef } from "@mcp-broker/shared";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { UpstreamListen } from "../../src/upstream/upstream-listen.js";
import { UpstreamSubscriptions, type WatchedBackend } from "../../src/upstream/upstream-subscriptions.js";

const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
const limits = { perSession: 1_000, perPrincipal: 1_000, total: 1_000 };
const logger = pino({ level: "silent" });
const GRACE_MS = 50;

interface Held {
  readonly call: string;
  resolve(): void;
  reject(error: Error): void;
}

/**
 * A backend that applies each subscribe/unsubscribe when its answer is sent (as a real one does
 * when it processes the request), so overlapping requests can leave it in a state the broker did
 * not intend. Requests of a held method wait for the test; `failures` makes the next N of a call fail.
 */
function fakeBackend(era: "legacy" | "modern" = "legacy") {
  const calls: string[] = [];
  const subscribed = new Set<string>();
  const held: Held[] = [];
  const holding = new Set<string>();
  const failures = new Map<string, number>();
  const backend = {
    id: "b",
    state: "connected" as WatchedBackend["state"],
    era,
    capabilities: { resources: { subscribe: true } },
    config: { pollIntervalMs: undefined, reconnect: { initialDelayMs: 100, maxDelayMs: 400, multiplier: 2 } },
    calls,
    subscribed,
    held,
    holding,
    failures,
    listenCalls: [] as string[],
    request: async (method: string, params: Record<string, unknown> | undefined): Promise<Record<string, unknown>> => {
      const uri = String(params?.uri);
      const call = `${method} ${uri}`;
      calls.push(call);
      const apply = (): void => {
        if (method === "resources/subscribe") subscribed.add(uri);
        if (method === "resources/unsubscribe") subscribed.delete(uri);
      };
      const failing = failures.get(call) ?? 0;
      if (failing > 0) {
        failures.set(call, failing - 1);
        throw new BrokerError("BACKEND_TIMEOUT", "no answer");
      }
      if (holding.has(method)) {
        await new Promise<void>((resolve, reject) => held.push({ call, resolve, reject }));
      }
      apply();
      return {};
    },
    /** Modern backends: replaced per test. */
    watchListen: async (uri: string): Promise<void> => {
      backend.listenCalls.push(uri);
    },
    unwatchListen: (_uri: string): void => undefined,
    /** The old API some versions used; accepted and ignored. */
    setListenFilter: (_filter: SubscriptionFilter): void => undefined,
  };
  return backend;
}

function world(era: "legacy" | "modern" = "legacy") {
  const registry = new MemoryRegistry();
  const backend = fakeBackend(era);
  const upstream = new UpstreamSubscriptions({ registry, updates: new MemoryUpdateLog(new MemoryBus(), new MemoryPositions()), clock, logger, instanceId: "i", releaseGraceMs: GRACE_MS, pollIntervalMs: 60_000 });
  upstream.attach({ get: () => backend });
  const ref = (uri: string, sessionId = "s1"): SubscriptionRef => ({ principal: "p", sessionId, backendId: "b", uri });
  return { registry, backend, upstream, ref };
}

/** A watcher whose registry wants `uris`, and the URIs of the updates it publishes, as a subscriber on the bus hears them. */
async function wantedAndHeard(uris: readonly string[]) {
  const bus = new MemoryBus();
  const published: string[] = [];
  bus.onMessage((_channel, message) => {
    if (message.kind === "resource.updated") published.push(message.uri);
  });
  const registry = new MemoryRegistry();
  const backend = fakeBackend();
  const upstream = new UpstreamSubscriptions({ registry, updates: new MemoryUpdateLog(bus, new MemoryPositions()), clock, logger, instanceId: "i", releaseGraceMs: GRACE_MS, pollIntervalMs: 60_000 });
  upstream.attach({ get: () => backend });
  for (const uri of uris) {
    await registry.add({ principal: "p", sessionId: "s1", backendId: "b", uri }, limits);
    await bus.subscribe(CHANNEL.resource("b", uri));
  }
  return { backend, upstream, published };
}

function track(promise: Promise<void>): { state: "pending" | "resolved" | "rejected"; error?: unknown } {
  const outcome: { state: "pending" | "resolved" | "rejected"; error?: unknown } = { state: "pending" };
  promise.then(
    () => (outcome.state = "resolved"),
    (error: unknown) => {
      outcome.state = "rejected";
      outcome.error = error;
    },
  );
  return outcome;
}

describe("upstream subscriptions", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("publishes each update once, at one position, under every watched key it falls under, and stamps them", async () => {
    const bus = new MemoryBus();
    const got: [string, string, number][] = [];
    bus.onMessage((channel, message) => {
      if (message.kind === "resource.updated") got.push([channel, message.uri, message.position]);
    });
    const updates = new MemoryUpdateLog(bus, new MemoryPositions());
    const backend = fakeBackend();
    const registry = new MemoryRegistry();
    const upstream = new UpstreamSubscriptions({ registry, updates, clock, logger, instanceId: "i", releaseGraceMs: GRACE_MS, pollIntervalMs: 60_000 });
    upstream.attach({ get: () => backend });
    const channel = (key: string): string => CHANNEL.resource("b", key);
    for (const uri of ["file:///d", "file:///d/a"]) {
      await registry.add({ principal: "p", sessionId: "s1", backendId: "b", uri }, limits);
      await upstream.ensure("b", uri);
      await bus.subscribe(channel(uri));
    }
    upstream.resourceUpdated("b", "file:///d/a");
    upstream.resourceUpdated("b", "file:///other");
    upstream.resourceUpdated("b", "file:///d/b");
    await vi.waitFor(() => expect(got).toHaveLength(3));
    const [first, second] = [got[0]![2], got[2]![2]];
    expect(got).toEqual([
      [channel("file:///d/a"), "file:///d/a", first],
      [channel("file:///d"), "file:///d/a", first],
      [channel("file:///d"), "file:///d/b", second],
    ]);
    expect(second).toBeGreaterThan(first);
    expect((await updates.stamps("b", ["file:///d", "file:///d/a"])).map((stamp) => stamp.updated)).toEqual([second, first]);
  });

  it("finds the watched ancestors of an update while URIs of the same and other lengths come and go", async () => {
    const published: string[] = [];
    const bus = new MemoryBus();
    bus.publish = async (_channel, message) => void published.push(message.kind === "resource.updated" ? `${message.key} ${message.uri}` : "");
    const registry = new MemoryRegistry();
    const upstream = new UpstreamSubscriptions({ registry, updates: new MemoryUpdateLog(bus, new MemoryPositions()), clock, logger, instanceId: "i", releaseGraceMs: GRACE_MS, pollIntervalMs: 60_000 });
    const backend = fakeBackend();
    upstream.attach({ get: () => backend });
    const ref = (uri: string): SubscriptionRef => ({ principal: "p", sessionId: "s1", backendId: "b", uri });
    // u://a and u://b have one length, u://cc another.
    for (const uri of ["u://a", "u://b", "u://cc"]) {
      await registry.add(ref(uri), limits);
      await upstream.ensure("b", uri);
    }
    await registry.remove(ref("u://a"));
    upstream.release("b", "u://a");
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    expect(upstream.watched("b")).toEqual(["u://b", "u://cc"]);

    for (const uri of ["u://a/x", "u://b/x", "u://cc/x/y", "u://b"]) upstream.resourceUpdated("b", uri);
    expect(published).toEqual(["u://b u://b/x", "u://cc u://cc/x/y", "u://b u://b"]);
  });

  it("releases an upstream subscription whose only holder left while the subscribe was in flight", async () => {
    const { registry, backend, upstream, ref } = world();
    await registry.add(ref("u://a"), limits);
    backend.holding.add("resources/subscribe");
    const ensured = track(upstream.ensure("b", "u://a"));
    await vi.advanceTimersByTimeAsync(0);
    expect(backend.calls).toEqual(["resources/subscribe u://a"]);

    // The session ends and its grace period runs out, all while the subscribe is still in flight.
    await registry.remove(ref("u://a"));
    upstream.release("b", "u://a");
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    backend.held.shift()?.resolve();
    await vi.advanceTimersByTimeAsync(0);

    expect(ensured.state).toBe("resolved");
    expect(backend.calls).toEqual(["resources/subscribe u://a", "resources/unsubscribe u://a"]);
    expect(backend.subscribed.size).toBe(0);
    expect(upstream.watched("b")).toEqual([]);
  });

  it("unwatches a URI a stale re-subscribe brought back although nobody holds it", async () => {
    const { backend, upstream } = world();
    // No holder in the registry and no release to come: nothing else would ever unwatch it.
    await upstream.ensure("b", "u://stale");
    await vi.advanceTimersByTimeAsync(0);
    expect(backend.calls).toEqual(["resources/subscribe u://stale", "resources/unsubscribe u://stale"]);
    expect(upstream.watched("b")).toEqual([]);
  });

  it("runs upstream operations on one URI in order: a new subscribe waits for the unsubscribe in flight", async () => {
    const { registry, backend, upstream, ref } = world();
    await registry.add(ref("u://a", "s1"), limits);
    await upstream.ensure("b", "u://a");
    await registry.remove(ref("u://a", "s1"));
    upstream.release("b", "u://a");
    backend.holding.add("resources/unsubscribe");
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    expect(backend.calls).toEqual(["resources/subscribe u://a", "resources/unsubscribe u://a"]);

    // A new subscriber arrives while the unsubscribe is in flight.
    await registry.add(ref("u://a", "s2"), limits);
    const again = track(upstream.ensure("b", "u://a"));
    await vi.advanceTimersByTimeAsync(0);
    expect(backend.calls).toHaveLength(2);
    expect(again.state).toBe("pending");

    backend.held.shift()?.resolve();
    await vi.advanceTimersByTimeAsync(0);
    expect(again.state).toBe("resolved");
    expect(backend.calls).toEqual(["resources/subscribe u://a", "resources/unsubscribe u://a", "resources/subscribe u://a"]);
    expect([...backend.subscribed]).toEqual(["u://a"]);
    expect(upstream.watched("b")).toEqual(["u://a"]);
  });

  it("marks a resource watched once its subscribe succeeded, and unwatches only when the registry's release check finds nobody subscribed", async () => {
    const { registry, backend, upstream, ref } = world();
    const marked: string[] = [];
    const checked: string[] = [];
    const markWatched = registry.markWatched.bind(registry);
    registry.markWatched = async (backendId, uri) => (marked.push(uri), markWatched(backendId, uri));
    const unwatch = registry.unwatch.bind(registry);
    registry.unwatch = async (backendId, uri) => (checked.push(uri), unwatch(backendId, uri));
    await registry.add(ref("u://a", "s1"), limits);
    backend.holding.add("resources/subscribe");
    const ensured = track(upstream.ensure("b", "u://a"));
    await vi.advanceTimersByTimeAsync(0);
    expect(marked).toEqual([]); // not before the backend answered
    backend.held.shift()?.resolve();
    await vi.advanceTimersByTimeAsync(0);
    expect(ensured.state).toBe("resolved");
    expect(marked).toEqual(["u://a"]);
    // Released while someone subscribed again in its grace period: the check keeps the watch.
    await registry.add(ref("u://a", "s2"), limits);
    upstream.release("b", "u://a");
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    expect(checked).toEqual(["u://a"]);
    expect(upstream.watched("b")).toEqual(["u://a"]);
    await registry.remove(ref("u://a", "s1"));
    await registry.remove(ref("u://a", "s2"));
    upstream.release("b", "u://a");
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    expect(checked).toEqual(["u://a", "u://a"]);
    expect(upstream.watched("b")).toEqual([]);
    expect(backend.calls).toEqual(["resources/subscribe u://a", "resources/unsubscribe u://a"]);
  });

  it("shares one subscribe among concurrent ensures, and a release cancelled in its grace period sends nothing", async () => {
    const { registry, backend, upstream, ref } = world();
    await registry.add(ref("u://a", "s1"), limits);
    const ensures = [upstream.ensure("b", "u://a"), upstream.ensure("b", "u://a"), upstream.ensure("b", "u://a")];
    // `watching` says ensure has nothing to do only once the watch is made, and not while a release is pending.
    expect(upstream.watching("b", "u://a")).toBe(false);
    await Promise.all(ensures);
    expect(upstream.watching("b", "u://a")).toBe(true);
    await registry.remove(ref("u://a", "s1"));
    upstream.release("b", "u://a");
    expect(upstream.watching("b", "u://a")).toBe(false);
    await vi.advanceTimersByTimeAsync(GRACE_MS / 2);
    await registry.add(ref("u://a", "s2"), limits);
    await upstream.ensure("b", "u://a");
    expect(upstream.watching("b", "u://a")).toBe(true);
    expect(upstream.watching("b", "u://other")).toBe(false);
    await vi.advanceTimersByTimeAsync(GRACE_MS * 2);
    expect(backend.calls).toEqual(["resources/subscribe u://a"]);
    expect(upstream.watched("b")).toEqual(["u://a"]);
  });

  it("runs releases that come due together 64 at a time, and every one of them in the end", async () => {
    const { registry, backend, upstream, ref } = world();
    const uris = Array.from({ length: 200 }, (_, i) => `u://${i}`);
    for (const uri of uris) await registry.add(ref(uri), limits);
    await Promise.all(uris.map((uri) => upstream.ensure("b", uri)));
    for (const uri of uris) await registry.remove(ref(uri));
    backend.holding.add("resources/unsubscribe");
    for (const uri of uris) upstream.release("b", uri);
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    const unsubscribes = (): number => backend.calls.filter((call) => call.startsWith("resources/unsubscribe")).length;
    expect(unsubscribes()).toBe(64);
    for (let answered = 0; backend.held.length > 0; answered++) {
      backend.held.shift()?.resolve();
      await vi.advanceTimersByTimeAsync(0);
      expect(backend.held.length).toBeLessThanOrEqual(64);
    }
    expect(unsubscribes()).toBe(200);
    expect(backend.subscribed.size).toBe(0);
    expect(upstream.watched("b")).toEqual([]);
  });

  it("tells its backends' readers to wait while 2 000 updates are being published, until 500 are left", async () => {
    const registry = new MemoryRegistry();
    const backend = fakeBackend();
    const updates = new MemoryUpdateLog(new MemoryBus(), new MemoryPositions());
    const acknowledge: (() => void)[] = [];
    updates.publish = () => new Promise<number>((resolve) => acknowledge.push(() => resolve(1)));
    const upstream = new UpstreamSubscriptions({ registry, updates, clock, logger, instanceId: "i", releaseGraceMs: GRACE_MS, pollIntervalMs: 60_000 });
    upstream.attach({ get: () => backend });
    await registry.add({ principal: "p", sessionId: "s1", backendId: "b", uri: "u://a" }, limits);
    await upstream.ensure("b", "u://a");
    for (let i = 0; i < 1_999; i++) upstream.resourceUpdated("b", "u://a");
    expect(upstream.backlog()).toBeUndefined();
    upstream.resourceUpdated("b", "u://a");
    const waiting = track(upstream.backlog() ?? Promise.reject(new Error("no backlog")));
    acknowledge.splice(0, 1_499).forEach((ack) => ack());
    await vi.advanceTimersByTimeAsync(0);
    expect(waiting.state).toBe("pending");
    acknowledge.shift()?.();
    await vi.advanceTimersByTimeAsync(0);
    expect(waiting.state).toBe("resolved");
    expect(upstream.backlog()).toBeUndefined();
  });

  it("publishes an update again, with backoff, while Redis refuses its publish (out of memory), until one gets through", async () => {
    const registry = new MemoryRegistry();
    const backend = fakeBackend();
    const updates = new MemoryUpdateLog(new MemoryBus(), new MemoryPositions());
    const published: { uri: string; params: unknown }[] = [];
    let refusals = 3;
    updates.publish = async (update) => {
      if (update.kind !== "resource.updated") return 0;
      if (refusals > 0) {
        refusals--;
        throw new Error("OOM command not allowed when used memory > 'maxmemory'.");
      }
      published.push({ uri: update.uri, params: update.params });
      return published.length;
    };
    const unpublished: string[] = [];
    const upstream = new UpstreamSubscriptions({
      registry,
      updates,
      clock,
      logger,
      instanceId: "i",
      releaseGraceMs: GRACE_MS,
      pollIntervalMs: 60_000,
      unpublished: (_backendId, _keys, uri) => unpublished.push(uri),
    });
    upstream.attach({ get: () => backend });
    for (const uri of ["u://a", "u://b"]) {
      await registry.add({ principal: "p", sessionId: "s1", backendId: "b", uri }, limits);
      await upstream.ensure("b", uri);
    }
    upstream.resourceUpdated("b", "u://a", { n: 1 });
    upstream.resourceUpdated("b", "u://a", { n: 2 });
    await vi.advanceTimersByTimeAsync(0);
    // Both refused: delivered locally, and one publish of u://a (its latest params) waits 250 ms.
    expect(unpublished).toEqual(["u://a", "u://a"]);
    await vi.advanceTimersByTimeAsync(249);
    expect(refusals).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(refusals).toBe(0); // refused again: the next try waits twice as long
    expect(published).toEqual([]);
    await vi.advanceTimersByTimeAsync(499);
    expect(published).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(published).toEqual([{ uri: "u://a", params: { n: 2 } }]);
    // Nothing else is pending: no more publishes, and updates go out at once again.
    await vi.advanceTimersByTimeAsync(10_000);
    upstream.resourceUpdated("b", "u://b");
    await vi.advanceTimersByTimeAsync(0);
    expect(published).toEqual([{ uri: "u://a", params: { n: 2 } }, { uri: "u://b", params: undefined }]);
    expect(unpublished).toEqual(["u://a", "u://a", "u://a"]);
    upstream.close();
  });

  it("a member that stops watching unsubscribes what it watched 64 at a time too", async () => {
    const { registry, backend, upstream, ref } = world();
    const uris = Array.from({ length: 150 }, (_, i) => `u://${i}`);
    for (const uri of uris) await registry.add(ref(uri), limits);
    await Promise.all(uris.map((uri) => upstream.ensure("b", uri)));
    backend.holding.add("resources/unsubscribe");
    upstream.relinquish("b");
    await vi.advanceTimersByTimeAsync(0);
    expect(upstream.watched("b")).toEqual([]);
    expect(backend.held).toHaveLength(64);
    while (backend.held.length > 0) {
      backend.held.shift()?.resolve();
      await vi.advanceTimersByTimeAsync(0);
      expect(backend.held.length).toBeLessThanOrEqual(64);
    }
    expect(backend.subscribed.size).toBe(0);
  });

  it("a reconcile does not subscribe again what was released after it read the wanted set", async () => {
    const { registry, backend, upstream, ref } = world();
    await registry.add(ref("u://gone"), limits);
    await upstream.ensure("b", "u://gone");
    // The reconcile reads the wanted set (still holding u://gone); before it goes on, the holder
    // leaves and the release completes (the member was busy: its read took longer than the grace).
    const wanted = registry.wanted.bind(registry);
    let readDone: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (readDone = resolve));
    registry.wanted = async (backendId: string) => {
      const uris = await wanted(backendId);
      await gate;
      return uris;
    };
    const reconciled = upstream.reconcile("b");
    await vi.advanceTimersByTimeAsync(0);
    await registry.remove(ref("u://gone"));
    upstream.release("b", "u://gone");
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    expect(upstream.watched("b")).toEqual([]);
    readDone();
    await reconciled;
    await vi.advanceTimersByTimeAsync(GRACE_MS);
    expect(backend.calls).toEqual(["resources/subscribe u://gone", "resources/unsubscribe u://gone"]);
  });

  it("retries a failed re-subscribe after a reconnect with backoff until it succeeds", async () => {
    const { registry, backend, upstream, ref } = world();
    await registry.add(ref("u://a"), limits);
    await registry.add(ref("u://b"), limits);
    backend.failures.set("resources/subscribe u://a", 2);

    await upstream.backendConnected(backend);
    expect(upstream.watched("b")).toEqual(["u://b"]);

    await vi.advanceTimersByTimeAsync(100); // first retry: 50..100 ms (equal jitter) → fails again
    expect(backend.calls.filter((c) => c === "resources/subscribe u://a")).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(200); // second retry: 100..200 ms → succeeds
    expect(backend.calls.filter((c) => c === "resources/subscribe u://a")).toHaveLength(3);
    expect(upstream.watched("b").sort()).toEqual(["u://a", "u://b"]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(backend.calls).toHaveLength(4);
  });

  it("announces each URI once when a reconcile overlaps a takeover's re-subscribe", async () => {
    // More URIs than one re-subscribe keeps in flight, so the reconcile finds some it has not reached.
    const uris = Array.from({ length: 100 }, (_, i) => `u://r/${i}`);
    const { backend, upstream, published: announced } = await wantedAndHeard(uris);
    backend.holding.add("resources/subscribe");
    const takeover = upstream.backendConnected(backend);
    await vi.waitFor(() => expect(backend.held.length).toBeGreaterThan(0));
    const reconcile = upstream.reconcile("b");
    backend.holding.clear();
    await vi.waitFor(async () => {
      for (const held of backend.held.splice(0)) held.resolve();
      await Promise.resolve();
      expect(upstream.watched("b")).toHaveLength(uris.length);
    });
    await Promise.all([takeover, reconcile]);
    await vi.waitFor(() => expect(announced).toHaveLength(uris.length));
    await vi.advanceTimersByTimeAsync(100);
    expect(announced.sort()).toEqual([...uris].sort());
  });

  it("does not announce on a takeover's re-subscribe a URI an update was published for since its watch began", async () => {
    const { backend, upstream, published } = await wantedAndHeard(["u://a", "u://b", "u://c"]);
    // A session's subscribe reaches the new watcher before its re-subscribe does: a and b are
    // watched, and a real update of a is published (it tells a's subscribers of all before it).
    await upstream.ensure("b", "u://a");
    await upstream.ensure("b", "u://b");
    upstream.resourceUpdated("b", "u://a");
    await vi.waitFor(() => expect(published).toEqual(["u://a"]));
    await upstream.backendConnected(backend);
    await vi.waitFor(() => expect(published).toHaveLength(3));
    await vi.advanceTimersByTimeAsync(100);
    expect(published.slice(1).sort()).toEqual(["u://b", "u://c"]);
  });

  it("stops retrying a re-subscribe once nobody wants the URI, or the backend dropped again", async () => {
    const { registry, backend, upstream, ref } = world();
    await registry.add(ref("u://a"), limits);
    await registry.add(ref("u://b"), limits);
    backend.failures.set("resources/subscribe u://a", 100);
    backend.failures.set("resources/subscribe u://b", 100);
    await upstream.backendConnected(backend);
    await registry.remove(ref("u://a"));
    await vi.advanceTimersByTimeAsync(100);
    expect(backend.calls.filter((c) => c === "resources/subscribe u://a")).toHaveLength(1);
    expect(backend.calls.filter((c) => c === "resources/subscribe u://b")).toHaveLength(2);

    backend.state = "backoff";
    upstream.backendDisconnected(backend);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(backend.calls.filter((c) => c === "resources/subscribe u://b")).toHaveLength(2);
  });

  it("on a modern backend, resolves ensure only once the upstream listen honors the URI, and rejects when refused", async () => {
    const { registry, backend, upstream, ref } = world("modern");
    const acks: Held[] = [];
    backend.watchListen = (uri: string) => new Promise<void>((resolve, reject) => acks.push({ call: uri, resolve, reject }));
    await registry.add(ref("u://a"), limits);
    await registry.add(ref("u://refused"), limits);
    const a = track(upstream.ensure("b", "u://a"));
    const refused = track(upstream.ensure("b", "u://refused"));
    await vi.advanceTimersByTimeAsync(10);
    expect(a.state).toBe("pending");
    expect(refused.state).toBe("pending");

    acks.find((h) => h.call === "u://a")?.resolve();
    acks.find((h) => h.call === "u://refused")?.reject(new BrokerError("BACKEND_UNAVAILABLE", "not honored"));
    await vi.advanceTimersByTimeAsync(0);
    expect(a.state).toBe("resolved");
    expect(refused.state).toBe("rejected");
    expect((refused.error as BrokerError).code).toBe("BACKEND_UNAVAILABLE");
    expect(upstream.watched("b")).toEqual(["u://a"]);
  });

  it("re-subscribes a modern backend's wanted URIs all at once after a reconnect: one listen request, not one per URI", async () => {
    const { registry, backend, upstream, ref } = world("modern");
    const opened: SubscriptionFilter[] = [];
    const listen = new UpstreamListen({
      backendId: "b",
      flags: {},
      clock,
      logger,
      policy: backend.config.reconnect,
      onGap: () => undefined,
      open: async (filter) => {
        opened.push(filter);
        return { honoredFilter: filter, close: async () => undefined, closed: new Promise<never>(() => undefined) } satisfies McpSubscription;
      },
    });
    backend.watchListen = (uri) => listen.add(uri);
    backend.unwatchListen = (uri) => listen.remove(uri);
    const uris = Array.from({ length: 100 }, (_, i) => `u://items/${i}`);
    for (const uri of uris) await registry.add(ref(uri), limits);

    const done = upstream.backendConnected(backend);
    await vi.advanceTimersByTimeAsync(10);
    await done;
    expect(opened).toHaveLength(1);
    expect(opened[0]?.resourceSubscriptions).toHaveLength(100);
    expect(upstream.watched("b")).toHaveLength(100);

    // And when everyone leaves, the releases coalesce into one more.
    for (const uri of uris) {
      await registry.remove(ref(uri));
      upstream.release("b", uri);
    }
    await vi.advanceTimersByTimeAsync(GRACE_MS + 10);
    expect(upstream.watched("b")).toEqual([]);
    expect(opened).toHaveLength(1); // nothing left to listen to: the stream is closed, not reopened
    await listen.dispose();
  });

  it("polls a backend that cannot push: on its ttlMs when given (capped at the longest timer), updating when the content changes", async () => {
    const { registry, backend, upstream, ref } = world();
    backend.capabilities = { resources: {} } as typeof backend.capabilities;
    let content = "v1";
    let ttlMs: number | undefined = 7_000;
    const reads: number[] = [];
    backend.request = async (method) => {
      if (method !== "resources/read") throw new Error(`unexpected ${method}`);
      reads.push(Date.now());
      return { contents: [{ uri: "u://p", text: content }], ...(ttlMs !== undefined && { ttlMs }) };
    };
    const updates = vi.spyOn(upstream, "resourceUpdated");
    await registry.add(ref("u://p"), limits);
    await upstream.ensure("b", "u://p");
    await vi.advanceTimersByTimeAsync(0);
    expect(reads).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(6_999);
    expect(reads).toHaveLength(1);
    content = "v2";
    ttlMs = 30 * 24 * 3_600_000; // 30 days: more than a Node timer holds (it would fire at once, over and over)
    await vi.advanceTimersByTimeAsync(1);
    expect(reads).toHaveLength(2);
    expect(updates).toHaveBeenCalledWith("b", "u://p");
    await vi.advanceTimersByTimeAsync(60_000);
    expect(reads).toHaveLength(2);
    upstream.release("b", "u://p");
    await registry.remove(ref("u://p"));
  });
});
