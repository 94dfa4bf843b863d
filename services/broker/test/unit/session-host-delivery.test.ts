import { CHANNEL, MemoryBus, MemoryRegistry, MemorySessionStore, systemClock, type AddOutcome, type BusMessage, type Clock, type SubscriptionLimits, type SubscriptionRef } from "@mcp-broker/shared";
import { pino } from "pino";
import { describe, expect, it, vi } from "vitest";
import { SimulatedClock } from "xstate";
import { Catalog } from "../../src/catalog/catalog.js";
import { Fanout } from "../../src/fanout/fanout.js";
import type { NotificationWriter } from "../../src/session/legacy-session.js";
import { SessionHost, type ListenOutcome } from "../../src/session/session-host.js";
import { ResumeCursors } from "../../src/session/resume-cursor.js";

function host(
  registry = new MemoryRegistry(),
  released: string[] = [],
  clock: Clock = systemClock,
  caughtUp: () => Promise<number> = () => Promise.resolve(1),
  ensure: (backendId: string, uri: string) => Promise<void> = async () => undefined,
) {
  const bus = new MemoryBus();
  const catalog = new Catalog([{ id: "b", prefix: true }]);
  const fanout = new Fanout({ bus, clock: systemClock, logger: pino({ level: "silent" }), names: catalog, releaseGraceMs: 0 });
  const store = new MemorySessionStore(systemClock);
  const sessions = new SessionHost({
    catalog,
    subscriptionTarget: (uri) => ({ backendId: "b", uri: uri.slice("b+".length) }),
    registry,
    upstream: { ensure, release: (_backendId, uri) => void released.push(uri) },
    fanout,
    sessions: store,
    bus,
    instanceId: "me",
    clock,
    logger: pino({ level: "silent" }),
    limits: { perSession: 10, perPrincipal: 10, total: 10 },
    idleTimeoutMs: 60_000,
    maxSessionsPerPrincipal: 10,
    resumeHistory: 64,
    resume: { since: () => Promise.reject(new Error("not in this test")), current: () => Promise.resolve(0), caughtUp },
    cursors: new ResumeCursors(() => "cluster"),
  });
  bus.onMessage((channel, message) => {
    if (message.kind === "resource.updated") fanout.receive(channel, message);
  });
  return { bus, sessions, fanout, store };
}

function writer(): NotificationWriter & { uris: string[] } {
  const uris: string[] = [];
  return { uris, closed: false, write: (n) => uris.push(JSON.stringify(n.legacyFrame().toString())), onClose: () => undefined, close: () => undefined };
}

/** A writer that reports its close to the session, as an SSE stream does when the client goes away. */
function closable(): NotificationWriter & { close(): void } {
  const listeners: (() => void)[] = [];
  const stream = {
    closed: false,
    write: () => undefined,
    onClose: (listener: () => void) => void listeners.push(listener),
    close: () => {
      if (stream.closed) return;
      stream.closed = true;
      for (const listener of listeners) listener();
    },
  };
  return stream;
}

const update = (key: string, uri: string, update: number, keys: number): BusMessage => ({ kind: "resource.updated", v: 1, origin: "o", backendId: "b", key, uri, at: 0, update, keys, position: update });

describe("session host: delivery of one backend update published under several keys", () => {
  it("gives a session subscribed to a resource and a sub-resource of it the update once", async () => {
    const { bus, sessions } = host();
    const both = await sessions.createLegacySession("p");
    const ancestorOnly = await sessions.createLegacySession("p");
    const [w1, w2] = [writer(), writer()];
    await both.attachStream(w1, undefined);
    await ancestorOnly.attachStream(w2, undefined);
    await both.subscribe("b+x://a");
    await both.subscribe("b+x://a/y");
    await ancestorOnly.subscribe("b+x://a");
    await bus.publish(CHANNEL.resource("b", "x://a/y"), update("x://a/y", "x://a/y", 1, 2));
    await bus.publish(CHANNEL.resource("b", "x://a"), update("x://a", "x://a/y", 1, 2));
    // Two separate updates of the same URI are two notifications.
    await bus.publish(CHANNEL.resource("b", "x://a"), update("x://a", "x://a/z", 2, 1));
    await bus.publish(CHANNEL.resource("b", "x://a"), update("x://a", "x://a/z", 3, 1));
    await vi.waitFor(() => expect(w2.uris).toHaveLength(3));
    expect(w1.uris).toHaveLength(3);
    expect(w1.uris[0]).toContain("b+x://a/y");
    sessions.close();
  });
});

describe("session host: a gap on the bus", () => {
  it("re-announces every subscribed resource once to each local subscriber, unless something about it arrived meanwhile", async () => {
    const { bus, sessions, fanout } = host();
    const one = await sessions.createLegacySession("p");
    const two = await sessions.createLegacySession("p");
    const [w1, w2] = [writer(), writer()];
    await one.attachStream(w1, undefined);
    await two.attachStream(w2, undefined);
    await one.subscribe("b+x://a");
    await one.subscribe("b+x://b");
    await two.subscribe("b+x://a");
    fanout.gap();
    fanout.gap(); // a second gap before the first is paid adds nothing
    expect(w1.uris).toEqual([]);
    // The watcher re-publishes x://b (its connection came back too): that covers it.
    await bus.publish(CHANNEL.resource("b", "x://b"), update("x://b", "x://b", 7, 1));
    await vi.waitFor(() => expect(w1.uris).toHaveLength(1));
    await vi.waitFor(() => expect(w2.uris).toHaveLength(1), { timeout: 3_000 });
    await vi.waitFor(() => expect(w1.uris).toHaveLength(2), { timeout: 3_000 });
    expect(w1.uris.sort()).toEqual([expect.stringContaining("b+x://a"), expect.stringContaining("b+x://b")]);
    expect(w2.uris).toEqual([expect.stringContaining("b+x://a")]);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(w1.uris).toHaveLength(2);
    sessions.close();
  });
});

describe("session host: a session actor that fails", () => {
  it("releases what it held, frees its slot and rejects whoever waits", async () => {
    const { sessions } = host();
    const session = await sessions.createLegacySession("p");
    await session.subscribe("b+x://a");
    const waiting = session.subscribe("b+x://b"); // answered by nobody once the actor has failed
    // What xstate sends a parent when a child's transition throws (see Actor._error).
    const root = (sessions as unknown as { root: { send(event: unknown): void } }).root;
    root.send({ type: `xstate.error.actor.${session.id}`, error: new Error("boom"), actorId: session.id });
    await expect(waiting).rejects.toMatchObject({ code: "INTERNAL" });
    expect(sessions.legacySession(session.id, "p")).toBeUndefined();
    expect(sessions.legacySessions()).toEqual([]);
    // The slot is free again: maxSessionsPerPrincipal is 10, and 10 more fit.
    for (let i = 0; i < 10; i++) await sessions.createLegacySession("p");
    sessions.close();
  });
});

/** A registry whose reservations wait for the test, as a networked one (Redis) would take its time. */
class SlowRegistry extends MemoryRegistry {
  private readonly gates: (() => void)[] = [];
  override async add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome> {
    await new Promise<void>((resolve) => this.gates.push(resolve));
    return super.add(ref, limits);
  }
  override async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
    await Promise.all(refs.map(() => new Promise<void>((resolve) => this.gates.push(resolve))));
    const outcomes: AddOutcome[] = [];
    for (const ref of refs) outcomes.push(await super.add(ref, limits));
    return outcomes;
  }
  waiting(): number {
    return this.gates.length;
  }
  openAll(): void {
    for (const open of this.gates.splice(0)) open();
  }
}

describe("session host: a listen stream closed while its subscriptions are being made", () => {
  it("releases the reservations that land after the close, so nothing outlives the stream", async () => {
    const registry = new SlowRegistry();
    const released: string[] = [];
    const { sessions } = host(registry, released);
    const listen = sessions.openListen("p", { toolsListChanged: false, promptsListChanged: false, resourcesListChanged: false }, ["b+x://1", "b+x://2", "b+x://3"], () => ({ write: () => undefined }) as never, () => undefined);
    await vi.waitFor(() => expect(registry.waiting()).toBe(3));
    listen.close();
    registry.openAll();
    await vi.waitFor(() => expect(released.sort()).toEqual(["x://1", "x://2", "x://3"]));
    for (const uri of ["x://1", "x://2", "x://3"]) expect(await registry.count("b", uri)).toBe(0);
    expect(sessions.listenCount()).toBe(0);
    sessions.close();
  });
});

describe("session host: an acknowledged listen stream that closes", () => {
  const flags = { toolsListChanged: false, promptsListChanged: false, resourcesListChanged: false };

  it("releases what it holds, not only what it honored: a refused URI can still be held", async () => {
    /** The first remove fails (Redis away while the upstream subscribe failed too), and a batch's reservations land though its answer is lost. */
    class Flaky extends MemoryRegistry {
      failRemove = true;
      loseAnswer = false;
      override async remove(ref: SubscriptionRef) {
        if (this.failRemove) throw new Error("Redis away");
        return super.remove(ref);
      }
      override async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
        const outcomes = await super.addMany(refs, limits);
        if (this.loseAnswer) throw new Error("the command timed out after it ran");
        return outcomes;
      }
    }
    const registry = new Flaky();
    const { sessions } = host(registry, undefined, undefined, undefined, async (_backendId, uri) => {
      if (uri === "x://bad") throw new Error("the backend is down");
    });
    const outcomes: ListenOutcome[] = [];
    const rolledBack = sessions.openListen("p", flags, ["b+x://good", "b+x://bad"], () => ({ principal: "p", flags, deliver: () => undefined }), (outcome) => outcomes.push(outcome));
    await vi.waitFor(() => expect(outcomes).toHaveLength(1));
    expect(outcomes[0]).toMatchObject({ type: "listen.acknowledged", honored: ["b+x://good"] });
    // Its rollback's release failed: refused, and held.
    expect(await registry.count("b", "x://bad")).toBe(1);
    registry.failRemove = false;
    rolledBack.close();
    await vi.waitFor(async () => expect(await registry.count("b", "x://bad")).toBe(0));
    expect(await registry.count("b", "x://good")).toBe(0);

    registry.loseAnswer = true;
    const lost = sessions.openListen("p", flags, ["b+x://1", "b+x://2"], () => ({ principal: "p", flags, deliver: () => undefined }), (outcome) => outcomes.push(outcome));
    await vi.waitFor(() => expect(outcomes).toHaveLength(2));
    expect(outcomes[1]).toMatchObject({ type: "listen.acknowledged", honored: [] });
    lost.close();
    await vi.waitFor(async () => expect((await registry.audit()).total).toBe(0));
    sessions.close();
  });
});

describe("session host: writing back what it holds (Redis lost it) while streams and sessions close", () => {
  it("leaves nothing held by one that closed while its subscriptions were written back", async () => {
    /** Write-back adds wait for the test once `gated`. */
    class Gated extends SlowRegistry {
      gated = false;
      override async add(ref: SubscriptionRef, limits: SubscriptionLimits): Promise<AddOutcome> {
        return this.gated ? super.add(ref, limits) : MemoryRegistry.prototype.add.call(this, ref, limits);
      }
      override async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
        return MemoryRegistry.prototype.addMany.call(this, refs, limits);
      }
    }
    const registry = new Gated();
    const { sessions } = host(registry);
    const flags = { toolsListChanged: false, promptsListChanged: false, resourcesListChanged: false };
    const outcomes: ListenOutcome[] = [];
    const listen = sessions.openListen("p", flags, ["b+x://1", "b+x://2"], () => ({ principal: "p", flags, deliver: () => undefined }), (outcome) => outcomes.push(outcome));
    const session = await sessions.createLegacySession("p");
    await session.subscribe("b+x://3");
    await vi.waitFor(() => expect(outcomes).toHaveLength(1));
    registry.gated = true;
    const writtenBack = sessions.reregister();
    // The session's add waits; the session closes and releases, then its add lands.
    await vi.waitFor(() => expect(registry.waiting()).toBe(1));
    await sessions.endLegacySession(session, "DELETE");
    registry.openAll();
    // The listen's first add waits; the listen closes and releases, then its adds land.
    await vi.waitFor(() => expect(registry.waiting()).toBe(1));
    listen.close();
    await vi.waitFor(() => expect(sessions.listenCount()).toBe(0));
    registry.openAll();
    await vi.waitFor(() => expect(registry.waiting()).toBe(1));
    registry.openAll();
    await writtenBack;
    await vi.waitFor(async () => expect((await registry.audit()).total).toBe(0));
    for (const uri of ["x://1", "x://2", "x://3"]) expect(await registry.count("b", uri)).toBe(0);
    sessions.close();
  });
});

describe("session host: a stop while a closed listen's subscribe is still under way", () => {
  it("waits for that subscribe to release what it reserved", async () => {
    /** A batch's reservations land 50 ms after the test lets them go. */
    class Late extends SlowRegistry {
      landed = false;
      override async addMany(refs: readonly SubscriptionRef[], limits: SubscriptionLimits): Promise<AddOutcome[]> {
        const outcomes = await super.addMany(refs, limits);
        await new Promise((resolve) => setTimeout(resolve, 50));
        this.landed = true;
        return outcomes;
      }
    }
    const registry = new Late();
    const { sessions } = host(registry);
    const flags = { toolsListChanged: false, promptsListChanged: false, resourcesListChanged: false };
    const listen = sessions.openListen("p", flags, ["b+x://1", "b+x://2"], () => ({ principal: "p", flags, deliver: () => undefined }), () => undefined);
    await vi.waitFor(() => expect(registry.waiting()).toBe(2));
    listen.close();
    const drained = sessions.drain(10_000);
    registry.openAll();
    await drained;
    expect(registry.landed).toBe(true);
    expect((await registry.audit()).total).toBe(0);
    sessions.close();
  });
});

describe("session host: a listen's acknowledgement", () => {
  it("waits until every event before a reserved position has arrived, names that position in its cursor (not the clock, which may be past it), and moves the broker's clock up to it", async () => {
    let caughtUp: ((position: number) => void) | undefined;
    const { sessions, fanout } = host(undefined, undefined, undefined, () => new Promise((resolve) => (caughtUp = resolve)));
    const flags = { toolsListChanged: true, promptsListChanged: false, resourcesListChanged: false };
    const outcomes: ListenOutcome[] = [];
    sessions.openListen("p", flags, ["b+x://1"], () => ({ principal: "p", flags, deliver: () => undefined }), (outcome) => outcomes.push(outcome));
    await vi.waitFor(() => expect(caughtUp).toBeDefined());
    expect(outcomes).toEqual([]);
    caughtUp?.(42);
    await vi.waitFor(() => expect(outcomes).toHaveLength(1));
    expect(outcomes[0]).toMatchObject({ type: "listen.acknowledged", cursor: expect.stringMatching(/:42$/) });
    expect(fanout.events.newest()).toBe(42);
    // An event after the position passed on meanwhile (on its way to the stream, behind the
    // acknowledgement) moves the clock on; the cursor still names the position.
    let again: ((position: number) => void) | undefined;
    const second = host(undefined, undefined, undefined, () => new Promise((resolve) => (again = resolve)));
    const acknowledged: ListenOutcome[] = [];
    second.sessions.openListen("p", flags, ["b+x://1"], () => ({ principal: "p", flags, deliver: () => undefined }), (outcome) => acknowledged.push(outcome));
    await vi.waitFor(() => expect(again).toBeDefined());
    second.fanout.events.cluster(50);
    again?.(42);
    await vi.waitFor(() => expect(acknowledged).toHaveLength(1));
    expect(acknowledged[0]).toMatchObject({ cursor: expect.stringMatching(/:42$/) });
    second.sessions.close();
    sessions.close();
  });
});

describe("session host: a legacy session closed while a subscribe is being made", () => {
  it("releases the reservation that lands after the close", async () => {
    const registry = new SlowRegistry();
    const released: string[] = [];
    const { sessions } = host(registry, released);
    const session = await sessions.createLegacySession("p");
    const subscribing = session.subscribe("b+x://1");
    await vi.waitFor(() => expect(registry.waiting()).toBe(1));
    session.close("test");
    await expect(subscribing).rejects.toMatchObject({ code: "BAD_PARAMS", message: "The session is closing; initialize a new one." });
    registry.openAll();
    await vi.waitFor(() => expect(released).toEqual(["x://1"]));
    expect(await registry.count("b", "x://1")).toBe(0);
    sessions.close();
  });
});

describe("session host: the idle timeout of a legacy session", () => {
  /** xstate's simulated clock, as the host's Clock (its timer handles are numbers). */
  function simulated(): { clock: SimulatedClock; hostClock: Clock } {
    const clock = new SimulatedClock();
    const hostClock: Clock = {
      now: () => clock.now(),
      setTimeout: (callback, ms) => ({ id: clock.setTimeout(callback, ms), unref: () => undefined }),
      clearTimeout: (handle) => clock.clearTimeout((handle as { id: number }).id),
    };
    return { clock, hostClock };
  }

  it("ends a session no request came for within the timeout while no stream was attached, counting from its last request", async () => {
    const { clock, hostClock } = simulated();
    const { sessions } = host(new MemoryRegistry(), [], hostClock);
    const quiet = await sessions.createLegacySession("p");
    const busy = await sessions.createLegacySession("p");
    clock.increment(50_000);
    busy.touch(); // a request: its 60 s start again from here
    clock.increment(10_000);
    expect(quiet.closed).toBe(true);
    expect(busy.closed).toBe(false);
    clock.increment(49_999);
    expect(busy.closed).toBe(false);
    busy.touch();
    clock.increment(1);
    expect(busy.closed).toBe(false); // the timer ran out, found the request and armed again
    clock.increment(59_999);
    expect(busy.closed).toBe(true);
    sessions.close();
  });

  it("never ends a session while a stream is attached; counts the timeout again from when its last stream closed", async () => {
    const { clock, hostClock } = simulated();
    const released: string[] = [];
    const { sessions } = host(new MemoryRegistry(), released, hostClock);
    const session = await sessions.createLegacySession("p");
    await session.subscribe("b+x://a");
    const [first, second] = [closable(), closable()];
    clock.increment(59_000);
    await session.attachStream(first, undefined);
    clock.increment(600_000);
    expect(session.closed).toBe(false);
    // A newer stream replaces the first: the first's close leaves the session attached.
    await session.attachStream(second, undefined);
    expect(first.closed).toBe(true);
    clock.increment(600_000);
    expect(session.closed).toBe(false);
    second.close();
    clock.increment(59_999);
    expect(session.closed).toBe(false);
    clock.increment(1);
    expect(session.closed).toBe(true);
    await vi.waitFor(() => expect(released).toEqual(["x://a"]));
    expect(sessions.legacySession(session.id, "p")).toBeUndefined();
    sessions.close();
  });

  it("writes the record's last-seen time at most once a second, however many requests come", async () => {
    const { clock, hostClock } = simulated();
    clock.set(10_000);
    const { sessions, store } = host(new MemoryRegistry(), [], hostClock);
    const session = await sessions.createLegacySession("p");
    const lastSeen = async () => (await store.get({ principal: "p", sessionId: session.id }))?.lastSeen;
    session.touch();
    expect(await lastSeen()).toBe(10_000);
    clock.increment(600);
    session.touch();
    expect(await lastSeen()).toBe(10_000);
    expect(session.lastActive).toBe(10_600);
    clock.increment(400);
    session.touch();
    expect(await lastSeen()).toBe(11_000);
    sessions.close();
  });

  it("does not end a session while its stream is attached, and counts from the stream's close", async () => {
    const { clock, hostClock } = simulated();
    const { sessions } = host(new MemoryRegistry(), [], hostClock);
    const session = await sessions.createLegacySession("p");
    let closeStream = () => {};
    await session.attachStream({ closed: false, write: () => undefined, onClose: (listener) => (closeStream = listener), close: () => undefined }, undefined);
    clock.increment(120_000);
    expect(session.closed).toBe(false);
    closeStream();
    clock.increment(59_999);
    expect(session.closed).toBe(false);
    clock.increment(1);
    expect(session.closed).toBe(true);
    sessions.close();
  });
});

describe("session host: ending a session", () => {
  it("answers a DELETE once the session has released what it held and left: its client may start another at once", async () => {
    let open = (): void => undefined;
    const gate = new Promise<void>((resolve) => (open = resolve));
    /** A registry whose reads of a session's subscriptions wait (a slow Redis). */
    class SlowRegistry extends MemoryRegistry {
      override async ofSession(principal: string, sessionId: string): Promise<SubscriptionRef[]> {
        await gate;
        return super.ofSession(principal, sessionId);
      }
    }
    const { sessions } = host(new SlowRegistry());
    const session = await sessions.createLegacySession("p");
    await session.subscribe("b+x://a");
    let ended = false;
    const ending = sessions.endLegacySession(session, "client DELETE").then(() => (ended = true));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(ended).toBe(false);
    open();
    await ending;
    expect(sessions.legacySession(session.id, "p")).toBeUndefined();
    sessions.close();
  });
});
