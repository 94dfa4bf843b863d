import { BrokerError, MemoryBus, MemoryBusHub, MemoryLeases, systemClock, watcherLease, type Leases } from "@mcp-broker/shared";
import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import { BackendWatchers } from "../../src/upstream/backend-watchers.js";
import type { UpstreamSubscriptions } from "../../src/upstream/upstream-subscriptions.js";

/** The watcher role of one member, recording what it is asked to watch. */
function localRole(): UpstreamSubscriptions & { ensured: string[]; marked: string[]; relinquished: string[]; connected: string[] } {
  const ensured: string[] = [];
  const marked: string[] = [];
  const relinquished: string[] = [];
  const connected: string[] = [];
  return {
    ensured,
    marked,
    relinquished,
    connected,
    ensure: async (_backendId: string, uri: string) => void ensured.push(uri),
    markWatched: (_backendId: string, uri: string) => void marked.push(uri),
    release: () => undefined,
    backendConnected: async ({ id }: { id: string }) => void connected.push(id),
    backendDisconnected: () => undefined,
    relinquish: (id: string) => void relinquished.push(id),
    reconcile: async () => undefined,
    updatesMissed: () => undefined,
  } as unknown as UpstreamSubscriptions & { ensured: string[]; marked: string[]; relinquished: string[]; connected: string[] };
}

/** `publishDelayMs`: a publish resolves that long after its message went out (a slow commands connection). */
function member(hub: MemoryBusHub, leases: Leases, instanceId: string, connected: boolean, timing = { leaseTtlMs: 60_000, watcherTimeoutMs: 2_000 }, publishDelayMs = 0) {
  const local = localRole();
  const bus = new MemoryBus(hub);
  if (publishDelayMs > 0) {
    const publish = bus.publish.bind(bus);
    bus.publish = async (...args) => {
      await publish(...args);
      await new Promise((resolve) => setTimeout(resolve, publishDelayMs));
    };
  }
  const watchers = new BackendWatchers({
    local,
    leases,
    bus,
    clock: systemClock,
    logger: pino({ level: "silent" }),
    instanceId,
    backendIds: ["x"],
    connected: () => connected,
    ...timing,
  });
  bus.onMessage((_channel, message) => {
    if (message.kind.startsWith("watch.")) watchers.receive(message as Parameters<typeof watchers.receive>[0]);
  });
  return { local, watchers };
}

/** `leases`, counting the lookups of a holder; `answer` may replace the answer to lookup n (1, 2, ...). */
function lookupsOf(leases: MemoryLeases, answer: (lookup: number) => string | undefined = () => undefined): { leases: Leases; count: number } {
  const counted: { leases: Leases; count: number } = {
    count: 0,
    leases: {
      holder: async (name: string): Promise<string | undefined> => answer(++counted.count) ?? leases.holder(name),
      acquire: (...args) => leases.acquire(...args),
      renew: (...args) => leases.renew(...args),
      release: (...args) => leases.release(...args),
      close: async () => undefined,
    } satisfies Leases,
  };
  return counted;
}

/** Two members that reach the backend, the first of them its watcher. */
async function firstWatchingSecondConnected() {
  const hub = new MemoryBusHub();
  const leases = new MemoryLeases();
  const first = member(hub, leases, "first", true);
  const second = member(hub, leases, "second", true);
  await Promise.all([first.watchers.start(), second.watchers.start()]);
  await first.watchers.backendConnected("x");
  expect(first.watchers.holds("x")).toBe(true);
  return { hub, leases, first, second };
}

describe("backend watchers across members", () => {
  it("sends an ensure to the holder, and looks the holder up again when the one it found no longer watches", async () => {
    const hub = new MemoryBusHub();
    const leases = new MemoryLeases();
    const stale = member(hub, leases, "stale", false);
    const holder = member(hub, leases, "holder", true);
    await Promise.all([stale.watchers.start(), holder.watchers.start()]);
    await holder.watchers.backendConnected("x");
    expect(holder.watchers.holds("x")).toBe(true);

    // The asking member's first lookup still names the instance that watched before, whose answer
    // comes back before the asking member's publish resolves: no unhandled rejection.
    const lookups = lookupsOf(leases, (lookup) => (lookup === 1 ? "stale" : undefined));
    const asking = member(hub, lookups.leases, "asking", false, undefined, 50);
    await asking.watchers.start();
    await asking.watchers.ensure("x", "u://1");
    expect(lookups.count).toBe(2);
    expect(holder.local.ensured).toEqual(["u://1"]);
    // Watched for another member: marked, so that later subscribes need not ask.
    expect(holder.local.marked).toEqual(["u://1"]);
    expect(stale.local.ensured).toEqual([]);
    expect(await leases.holder(watcherLease("x"))).toBe("holder");
    await Promise.all([stale.watchers.close(), holder.watchers.close(), asking.watchers.close()]);
  });

  it("looks the watcher up once for a burst of ensures, and again once it no longer watches", async () => {
    const { hub, leases, first, second } = await firstWatchingSecondConnected();
    const lookups = lookupsOf(leases);
    const asking = member(hub, lookups.leases, "asking", false);
    await asking.watchers.start();
    for (let i = 0; i < 5; i++) await asking.watchers.ensure("x", `u://${i}`);
    expect(lookups.count).toBe(1);
    expect(first.local.ensured).toEqual(["u://0", "u://1", "u://2", "u://3", "u://4"]);

    // The watcher gives its lease up and another member takes it: the next ensure is told so by the
    // old one and looks the new one up.
    await first.watchers.close();
    await second.watchers.backendConnected("x");
    expect(second.watchers.holds("x")).toBe(true);
    await asking.watchers.ensure("x", "u://5");
    expect(second.local.ensured).toEqual(["u://5"]);
    expect(lookups.count).toBe(2);
    await Promise.all([second.watchers.close(), asking.watchers.close()]);
  });

  it("asks the new watcher when this member stops watching while it subscribes (another member took the lease over)", async () => {
    const { leases, first, second } = await firstWatchingSecondConnected();
    // The upstream subscribe is under way when the lease moves: it is undone, and says so.
    let fail: (error: Error) => void = () => undefined;
    first.local.ensure = () => new Promise<void>((_resolve, reject) => (fail = reject));
    const ensured = first.watchers.ensure("x", "u://1");
    await leases.release(watcherLease("x"), "first");
    await second.watchers.backendConnected("x");
    await first.watchers.backendConnected("x"); // its renewal fails: it stops watching
    expect(first.local.relinquished).toEqual(["x"]);
    fail(new BrokerError("BACKEND_UNAVAILABLE", "Backend 'x': its watcher changed while subscribing; retry.", { backend: "x", watcherChanged: true }));
    await ensured;
    expect(second.local.ensured).toEqual(["u://1"]);
    await Promise.all([first.watchers.close(), second.watchers.close()]);
  });

  it("asks the new watcher when the one an ensure waits on died and another took its lease over", async () => {
    const hub = new MemoryBusHub();
    const leases = new MemoryLeases();
    // A watcher that died holding the lease: it will never answer.
    expect(await leases.acquire(watcherLease("x"), "dead", 60_000)).toBe(true);
    const asking = member(hub, leases, "asking", false, { leaseTtlMs: 300, watcherTimeoutMs: 60_000 });
    const next = member(hub, leases, "next", true);
    await Promise.all([asking.watchers.start(), next.watchers.start()]);
    const ensured = asking.watchers.ensure("x", "u://1");
    // The dead watcher's lease expires and another member takes over.
    await leases.release(watcherLease("x"), "dead");
    await next.watchers.backendConnected("x");
    await ensured; // long before the 60 s watcher timeout
    expect(next.local.ensured).toEqual(["u://1"]);
    await Promise.all([asking.watchers.close(), next.watchers.close()]);
  });

  it("takes a lease that vanished (Redis lost its data) back at its next renewal, without watching everything again", async () => {
    const hub = new MemoryBusHub();
    const leases = new MemoryLeases();
    const holder = member(hub, leases, "holder", true, { leaseTtlMs: 300, watcherTimeoutMs: 2_000 });
    await holder.watchers.start();
    await holder.watchers.backendConnected("x");
    expect(holder.local.connected).toEqual(["x"]);
    await leases.release(watcherLease("x"), "holder"); // what a Redis restarted empty looks like
    await vi.waitFor(async () => expect(await leases.holder(watcherLease("x"))).toBe("holder"));
    expect(holder.watchers.holds("x")).toBe(true);
    expect(holder.local.relinquished).toEqual([]);
    expect(holder.local.connected).toEqual(["x"]);
    await holder.watchers.close();
  });

  it("after Redis came back empty, lets the watcher take its lease back: the others leave the vacant lease alone for one lease TTL", async () => {
    const hub = new MemoryBusHub();
    const leases = new MemoryLeases();
    // Long TTLs: the periodic steps (every third of the TTL) do not come into it.
    const holder = member(hub, leases, "holder", true, { leaseTtlMs: 6_000, watcherTimeoutMs: 10_000 });
    const other = member(hub, leases, "other", true, { leaseTtlMs: 6_000, watcherTimeoutMs: 10_000 });
    await Promise.all([holder.watchers.start(), other.watchers.start()]);
    await holder.watchers.backendConnected("x");
    // Redis restarts empty: both members' connections drop; a step while they are down takes nothing.
    holder.watchers.publishLost();
    other.watchers.publishLost();
    await leases.release(watcherLease("x"), "holder");
    await other.watchers.backendConnected("x");
    expect(other.watchers.holds("x")).toBe(false);
    // Both members' connections come back; the other one happens to try the lease first.
    other.watchers.publishGap();
    await other.watchers.backendConnected("x");
    expect(other.watchers.holds("x")).toBe(false);
    // An ensure on the other member waits for the watcher to come back instead of failing.
    const ensured = other.watchers.ensure("x", "u://1");
    holder.watchers.publishGap();
    await vi.waitFor(async () => expect(await leases.holder(watcherLease("x"))).toBe("holder"));
    await ensured;
    expect(holder.local.ensured).toEqual(["u://1"]);
    expect(holder.local.relinquished).toEqual([]);
    expect(holder.local.connected).toEqual(["x"]);
    await Promise.all([holder.watchers.close(), other.watchers.close()]);
  });

  it("answers -32000 at once when no member reaches the backend", async () => {
    const hub = new MemoryBusHub();
    const leases = new MemoryLeases();
    const alone = member(hub, leases, "alone", false);
    await alone.watchers.start();
    await expect(alone.watchers.ensure("x", "u://1")).rejects.toMatchObject({ code: "BACKEND_UNAVAILABLE" });
    await alone.watchers.close();
  });

  it("takes only free leases during its first lease TTL: a holder that is gone is left to members that have been up", async () => {
    const hub = new MemoryBusHub();
    const inner = new MemoryLeases();
    const asked: (boolean | undefined)[] = [];
    const leases: Leases = {
      acquire: (name, owner, ttlMs, options) => {
        asked.push(options?.takeOver);
        return inner.acquire(name, owner, ttlMs, options);
      },
      renew: (...args) => inner.renew(...args),
      release: (...args) => inner.release(...args),
      holder: (name) => inner.holder(name),
      close: async () => undefined,
    };
    expect(await inner.acquire(watcherLease("x"), "previous incarnation", 60_000)).toBe(true);
    const newcomer = member(hub, leases, "newcomer", true, { leaseTtlMs: 300, watcherTimeoutMs: 2_000 });
    await newcomer.watchers.start();
    await newcomer.watchers.backendConnected("x");
    expect(asked).toEqual([false]);
    // One TTL on, its periodic steps (every third of it) may take over a gone holder's lease.
    await vi.waitFor(() => expect(asked.at(-1)).toBe(true), { timeout: 2_000 });
    expect(newcomer.watchers.holds("x")).toBe(false); // the memory engine's holder is never gone
    await newcomer.watchers.close();
  });
});
