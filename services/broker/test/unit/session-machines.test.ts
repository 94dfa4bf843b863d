import { BrokerError, type AddOutcome } from "@mcp-broker/shared";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createActor, fromPromise, waitFor, type Actor } from "xstate";
import { legacySessionMachine, type LegacySessionEmitted } from "../../src/session/legacy-session-machine.js";
import { listenMachine, type ListenEmitted } from "../../src/session/listen-machine.js";
import { subscribeMany } from "../../src/session/subscribe-many.js";
import { runSubscriptionFlow, type FlowSteps } from "../../src/session/subscription-flow.js";

/** A fake I/O world for the machines: a registry with limits and an upstream that can fail. */
function world(options: { maxPerSession?: number; upstreamFails?: boolean; reserveWaits?: Promise<void> } = {}) {
  const held = new Map<string, Set<string>>();
  const calls: string[] = [];
  const steps: FlowSteps = {
    epoch: () => undefined,
    validate: (uri) => {
      calls.push(`validate ${uri}`);
      if (uri.startsWith("bad")) throw new BrokerError("UNKNOWN_RESOURCE", "unknown", { uri });
      return { backendId: "b", uri };
    },
    reserve: async (ref): Promise<AddOutcome> => {
      calls.push(`reserve ${ref.uri}`);
      await options.reserveWaits;
      const set = held.get(ref.sessionId) ?? new Set<string>();
      held.set(ref.sessionId, set);
      if (set.has(ref.uri)) return { status: "exists" };
      if (set.size >= (options.maxPerSession ?? 10)) return { status: "limit", limit: "session", max: options.maxPerSession ?? 10 };
      set.add(ref.uri);
      return { status: "added", first: true };
    },
    reserveMany: async (refs) => {
      calls.push(`reserveMany ${refs.map((ref) => ref.uri).join(" ")}`);
      const outcomes: AddOutcome[] = [];
      for (const ref of refs) outcomes.push(await steps.reserve(ref));
      return outcomes;
    },
    ensureUpstream: async (target) => {
      calls.push(`ensure ${target.uri}`);
      if (options.upstreamFails) throw new BrokerError("BACKEND_UNAVAILABLE", "down");
    },
    release: async (ref) => {
      calls.push(`release ${ref.uri}`);
      held.get(ref.sessionId)?.delete(ref.uri);
    },
  };
  const releaseAll = fromPromise(async ({ input }: { input: { principal: string; sessionId: string } }) => {
    calls.push("releaseAll");
    held.delete(input.sessionId);
  });
  return {
    held,
    calls,
    legacy: legacySessionMachine.provide({ actors: { releaseAll } }),
    /** The host's part of a legacy session: runs the subscribes and unsubscribes its actor asks for. */
    host(actor: Actor<typeof legacySessionMachine>, stopped: () => boolean = () => false) {
      actor.on("subscribe.run", ({ uri, replyTo }) => {
        void runSubscriptionFlow(steps, { principal: "p", sessionId: actor.getSnapshot().context.id, uri }, stopped).then((output) => actor.send({ type: "subscribe.done", replyTo, output }));
      });
      actor.on("unsubscribe.run", ({ target, replyTo }) => {
        calls.push(`unsubscribe ${target.uri}`);
        held.get(actor.getSnapshot().context.id)?.delete(target.uri);
        queueMicrotask(() => actor.send({ type: "unsubscribe.done", replyTo }));
      });
    },
    /** The host's part of a listen: runs the subscribe and the release its actor asks for. */
    listenHost(actor: Actor<typeof listenMachine>) {
      const subscribing = new AbortController();
      actor.on("subscribe.run", ({ input }) => {
        void (async () => {
          for (const uri of input.uris) if (uri.startsWith("bad")) throw new BrokerError("UNKNOWN_RESOURCE", "unknown", { uri });
          return subscribeMany(steps, input, { concurrency: 4, maxPerSession: options.maxPerSession ?? 10, signal: subscribing.signal });
        })().then(
          (output) => actor.send({ type: "subscribe.done", output }),
          (error: unknown) => actor.send({ type: "subscribe.failed", error }),
        );
      });
      actor.on("listen.closed", ({ sessionId }) => {
        subscribing.abort();
        calls.push("releaseAll");
        held.delete(sessionId);
      });
    },
    steps,
  };
}

function record<T extends { type: string }>(actor: { on: (type: "*", fn: (e: T) => void) => unknown }): T[] {
  const events: T[] = [];
  actor.on("*", (e) => events.push(e));
  return events;
}

describe("legacy session actor", () => {
  function start(w: ReturnType<typeof world>) {
    const actor = createActor(w.legacy, { input: { id: "s1", principal: "p" } });
    const events = record<LegacySessionEmitted>(actor);
    w.host(actor, () => actor.getSnapshot().status !== "active" || actor.getSnapshot().matches("closing"));
    actor.start();
    return { actor, events };
  }

  const replies = (events: LegacySessionEmitted[]) =>
    events.filter((e): e is Extract<LegacySessionEmitted, { type: "reply" }> => e.type === "reply").map((e) => [e.replyTo, e.error?.code ?? "ok"]);

  it("runs validate → reserve → ensure, adds interest, then answers; a second subscribe is idempotent", async () => {
    const w = world();
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 2 });
    await vi.waitFor(() => expect(replies(events)).toEqual([[1, "ok"], [2, "ok"]]));
    expect(w.calls).toEqual(["validate u1", "reserve u1", "ensure u1", "validate u1", "reserve u1"]);
    expect(events.filter((e) => e.type === "interest.add")).toHaveLength(1);
    const interestAt = events.findIndex((e) => e.type === "interest.add");
    const replyAt = events.findIndex((e) => e.type === "reply");
    expect(interestAt).toBeLessThan(replyAt);
    expect(Object.keys(actor.getSnapshot().context.subscriptions)).toEqual(["u1"]);
  });

  it("runs operations sent together one at a time, in order; one answered at once waits its turn", async () => {
    const w = world();
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    actor.send({ type: "subscription.remove", uri: "never", replyTo: 2 });
    actor.send({ type: "subscription.remove", uri: "u1", replyTo: 3 });
    actor.send({ type: "subscription.add", uri: "u2", replyTo: 4 });
    actor.send({ type: "subscription.remove", uri: "also-never", replyTo: 5 });
    actor.send({ type: "subscription.add", uri: "bad", replyTo: 6 });
    await vi.waitFor(() => expect(replies(events)).toHaveLength(6));
    expect(replies(events)).toEqual([[1, "ok"], [2, "ok"], [3, "ok"], [4, "ok"], [5, "ok"], [6, "UNKNOWN_RESOURCE"]]);
    expect(w.calls).toEqual(["validate u1", "reserve u1", "ensure u1", "unsubscribe u1", "validate u2", "reserve u2", "ensure u2", "validate bad"]);
    expect(Object.keys(actor.getSnapshot().context.subscriptions)).toEqual(["u2"]);
    expect(actor.getSnapshot().context.queue).toEqual([]);
  });

  it("treats URIs that are Object.prototype names as plain keys", async () => {
    const w = world();
    const { actor, events } = start(w);
    actor.send({ type: "subscription.remove", uri: "toString", replyTo: 1 }); // not subscribed: answered at once
    actor.send({ type: "subscription.add", uri: "__proto__", replyTo: 2 });
    actor.send({ type: "subscription.add", uri: "constructor", replyTo: 3 });
    await vi.waitFor(() => expect(replies(events)).toEqual([[1, "ok"], [2, "ok"], [3, "ok"]]));
    expect(w.calls.filter((c) => c.startsWith("unsubscribe"))).toEqual([]);
    expect(Object.keys(actor.getSnapshot().context.subscriptions).sort()).toEqual(["__proto__", "constructor"]);
    actor.send({ type: "subscription.remove", uri: "__proto__", replyTo: 4 });
    await vi.waitFor(() => expect(replies(events)).toHaveLength(4));
    expect(Object.keys(actor.getSnapshot().context.subscriptions)).toEqual(["constructor"]);
    expect(events.filter((e) => e.type === "interest.remove").map((e) => "uri" in e && e.uri)).toEqual(["__proto__"]);
  });

  it("does not ask for the upstream subscription when the registry says the watcher has it watched already", async () => {
    const w = world();
    const watched: FlowSteps = { ...w.steps, reserve: async (ref) => (w.calls.push(`reserve ${ref.uri}`), { status: "added", first: false, watched: true }) };
    const output = await runSubscriptionFlow(watched, { principal: "p", sessionId: "s1", uri: "u1" }, () => false);
    expect(output).toEqual({ ok: true, target: { backendId: "b", uri: "u1" }, added: true });
    expect(w.calls).toEqual(["validate u1", "reserve u1"]);
    const first = await runSubscriptionFlow(w.steps, { principal: "p", sessionId: "s1", uri: "u2" }, () => false);
    expect(first.ok).toBe(true);
    expect(w.calls.slice(2)).toEqual(["validate u2", "reserve u2", "ensure u2"]);
  });

  it("rolls the reservation back when the upstream subscription fails", async () => {
    const w = world({ upstreamFails: true });
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    await vi.waitFor(() => expect(replies(events)).toEqual([[1, "BACKEND_UNAVAILABLE"]]));
    expect(w.calls).toEqual(["validate u1", "reserve u1", "ensure u1", "release u1"]);
    expect(w.held.get("s1")?.size).toBe(0);
    expect(events.some((e) => e.type === "interest.add")).toBe(false);
  });

  it("answers unknown URIs and limits with their error codes and keeps nothing", async () => {
    const w = world({ maxPerSession: 1 });
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "bad://x", replyTo: 1 });
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 2 });
    actor.send({ type: "subscription.add", uri: "u2", replyTo: 3 });
    await vi.waitFor(() => expect(replies(events)).toEqual([[1, "UNKNOWN_RESOURCE"], [2, "ok"], [3, "SUBSCRIPTION_LIMIT"]]));
    const limit = events.find((e) => e.type === "reply" && e.replyTo === 3) as Extract<LegacySessionEmitted, { type: "reply" }>;
    expect(limit.error?.data).toMatchObject({ limit: "session", max: 1 });
  });

  it("unsubscribes (interest removed before the answer) and answers {} for what is not subscribed", async () => {
    const w = world();
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    actor.send({ type: "subscription.remove", uri: "u1", replyTo: 2 });
    actor.send({ type: "subscription.remove", uri: "never", replyTo: 3 });
    await vi.waitFor(() => expect(replies(events)).toEqual([[1, "ok"], [2, "ok"], [3, "ok"]]));
    expect(w.calls).toContain("unsubscribe u1");
    expect(w.calls).not.toContain("unsubscribe never");
    const removeAt = events.findIndex((e) => e.type === "interest.remove");
    const replyAt = events.findIndex((e) => e.type === "reply" && e.replyTo === 2);
    expect(removeAt).toBeGreaterThan(-1);
    expect(removeAt).toBeLessThan(replyAt);
  });

  it("ends when the host's idle timer runs out, releasing everything it held", async () => {
    const w = world();
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    await vi.waitFor(() => expect(replies(events)).toHaveLength(1));
    actor.send({ type: "session.idle" });
    await waitFor(actor, (s) => s.status === "done");
    expect(w.calls.at(-1)).toBe("releaseAll");
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(["interest.remove", "session.ended"]));
  });

  it("releases a reservation that lands after the session closed, and answers the subscribe as closing", async () => {
    let land = () => {};
    const w = world({ reserveWaits: new Promise<void>((resolve) => (land = resolve)) });
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    await vi.waitFor(() => expect(w.calls).toContain("reserve u1"));
    actor.send({ type: "session.close", reason: "DELETE" });
    await waitFor(actor, (s) => s.status === "done");
    expect(replies(events)).toEqual([[1, "BAD_PARAMS"]]);
    land();
    await vi.waitFor(() => expect(w.calls.at(-1)).toBe("release u1"));
    expect(w.calls).not.toContain("ensure u1");
    expect(w.held.get("s1")?.size ?? 0).toBe(0);
    expect(events.some((e) => e.type === "interest.add")).toBe(false);
  });

  it("releases everything on close and rejects operations while closing", async () => {
    const w = world();
    const { actor, events } = start(w);
    actor.send({ type: "subscription.add", uri: "u1", replyTo: 1 });
    await vi.waitFor(() => expect(replies(events)).toHaveLength(1));
    actor.send({ type: "session.close", reason: "DELETE" });
    await waitFor(actor, (s) => s.status === "done");
    expect(w.held.has("s1")).toBe(false);
    expect(events.filter((e) => e.type === "interest.remove")).toHaveLength(1);
  });
});

describe("listen actor", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function start(w: ReturnType<typeof world>, uris: string[]) {
    const actor = createActor(listenMachine, {
      input: { id: "l1", principal: "p", flags: { toolsListChanged: true, promptsListChanged: false, resourcesListChanged: false }, uris },
    });
    w.listenHost(actor);
    const events = record<ListenEmitted>(actor);
    actor.start();
    return { actor, events };
  }

  it("acknowledges after subscribing, leaving out URIs over the limit, before anything else", async () => {
    const w = world({ maxPerSession: 2 });
    const { events } = start(w, ["u1", "u2", "u3"]);
    await vi.waitFor(() => expect(events.some((e) => e.type === "listen.acknowledged")).toBe(true));
    const ack = events.find((e) => e.type === "listen.acknowledged") as Extract<ListenEmitted, { type: "listen.acknowledged" }>;
    expect(ack.honored.map(({ uri }) => uri)).toEqual(["u1", "u2"]);
    expect(ack.refused.map(({ uri, error }) => [uri, error.code, error.data?.limit])).toEqual([["u3", "SUBSCRIPTION_LIMIT", "session"]]);
    expect(events.map((e) => e.type)).toEqual(["subscribe.run", "listen.acknowledged"]);
  });

  it("refuses URIs past the session limit without trying them, keeping request order", async () => {
    const w = world({ maxPerSession: 3 });
    const uris = Array.from({ length: 50 }, (_, i) => `u${i}`);
    const out = await subscribeMany(w.steps, { principal: "p", sessionId: "s", uris }, { concurrency: 4, maxPerSession: 3 });
    expect(out.honored.map((h) => h.uri)).toEqual(["u0", "u1", "u2"]);
    expect(out.refused.map((r) => r.uri)).toEqual(uris.slice(3));
    expect(out.refused.every((r) => r.error.code === "SUBSCRIPTION_LIMIT")).toBe(true);
    // Reserved together, in one step, in request order.
    expect(w.calls.filter((c) => c.startsWith("reserve"))).toEqual(["reserveMany u0 u1 u2", "reserve u0", "reserve u1", "reserve u2"]);
  });

  it("reserves every URI in one step, skips the upstream call for those the registry says are watched, and releases one whose upstream subscription fails", async () => {
    const w = world({ maxPerSession: 100 });
    const steps: FlowSteps = {
      ...w.steps,
      reserveMany: async (refs) => {
        const outcomes = await w.steps.reserveMany(refs);
        return outcomes.map((outcome, i) => (refs[i]?.uri === "watched" && outcome.status === "added" ? { ...outcome, first: false, watched: true } : outcome));
      },
      ensureUpstream: async (target) => {
        w.calls.push(`ensure ${target.uri}`);
        if (target.uri === "down") throw new BrokerError("BACKEND_UNAVAILABLE", "down");
      },
    };
    const out = await subscribeMany(steps, { principal: "p", sessionId: "s", uris: ["a", "watched", "down", "bad://x", "b"] }, { concurrency: 2, maxPerSession: 100 });
    expect(out.honored.map((h) => h.uri)).toEqual(["a", "watched", "b"]);
    expect(out.refused.map((r) => [r.uri, r.error.code])).toEqual([["down", "BACKEND_UNAVAILABLE"], ["bad://x", "UNKNOWN_RESOURCE"]]);
    expect(w.calls.filter((c) => c.startsWith("reserveMany"))).toEqual(["reserveMany a watched down b"]);
    expect(w.calls.filter((c) => c.startsWith("ensure") || c.startsWith("release")).sort()).toEqual(["ensure a", "ensure b", "ensure down", "release down"]);
    expect([...(w.held.get("s") ?? [])].sort()).toEqual(["a", "b", "watched"]);
  });

  it("skips the upstream call for what this member says it watches already", async () => {
    const w = world({ maxPerSession: 100 });
    const steps: FlowSteps = { ...w.steps, upstreamWatched: (target) => target.uri.startsWith("held") };
    const out = await subscribeMany(steps, { principal: "p", sessionId: "s", uris: ["held1", "new", "held2"] }, { concurrency: 2, maxPerSession: 100 });
    expect(out.honored.map((h) => h.uri)).toEqual(["held1", "new", "held2"]);
    expect(w.calls.filter((c) => c.startsWith("ensure"))).toEqual(["ensure new"]);
  });

  it("stops starting subscriptions once aborted and reports the rest as refused", async () => {
    const w = world({ maxPerSession: 100 });
    const abort = new AbortController();
    abort.abort();
    const out = await subscribeMany(w.steps, { principal: "p", sessionId: "s", uris: ["a", "b"] }, { concurrency: 2, maxPerSession: 100, signal: abort.signal });
    expect(out.honored).toEqual([]);
    expect(out.refused.map((r) => r.uri)).toEqual(["a", "b"]);
    expect(w.calls).toEqual([]);
  });

  it("rejects the whole request when a URI is unknown, holding nothing", async () => {
    const w = world();
    const { actor, events } = start(w, ["u1", "bad://x"]);
    await waitFor(actor, (s) => s.status === "done");
    const rejected = events.find((e) => e.type === "listen.rejected") as Extract<ListenEmitted, { type: "listen.rejected" }>;
    expect(rejected.error.data).toEqual({ uri: "bad://x" });
    expect(w.calls.filter((c) => c.startsWith("reserve"))).toEqual([]);
  });

  it("honors URIs named like Object.prototype members as plain keys, and removes their interest on close", async () => {
    const w = world();
    const { actor, events } = start(w, ["__proto__", "toString"]);
    await vi.waitFor(() => expect(events.some((e) => e.type === "listen.acknowledged")).toBe(true));
    const ack = events.find((e) => e.type === "listen.acknowledged") as Extract<ListenEmitted, { type: "listen.acknowledged" }>;
    expect(ack.honored.map(({ uri, target }) => [uri, target.uri])).toEqual([["__proto__", "__proto__"], ["toString", "toString"]]);
    actor.send({ type: "stream.closed" });
    await waitFor(actor, (s) => s.status === "done");
    // One event for all of the stream's targets, as for the interest added.
    const closed = events.find((e) => e.type === "listen.closed") as Extract<ListenEmitted, { type: "listen.closed" }>;
    expect(closed.targets.map((t) => t.uri)).toEqual(["__proto__", "toString"]);
  });

  it("releases everything when the stream closes", async () => {
    const w = world();
    const { actor, events } = start(w, ["u1"]);
    await vi.waitFor(() => expect(events.some((e) => e.type === "listen.acknowledged")).toBe(true));
    actor.send({ type: "stream.closed" });
    await waitFor(actor, (s) => s.status === "done");
    expect(w.calls.at(-1)).toBe("releaseAll");
    expect(events.map((e) => e.type)).toEqual(["subscribe.run", "listen.acknowledged", "listen.closed"]);
  });

  it("has what a subscribe under way reserved released when the stream closes first, and acknowledges nothing", () => {
    const w = world();
    const { actor, events } = start(w, ["u1"]);
    actor.send({ type: "stream.closed" });
    expect(actor.getSnapshot().status).toBe("done");
    expect(events.map((e) => e.type)).toEqual(["subscribe.run", "listen.closed"]);
    const closed = events.at(-1) as Extract<ListenEmitted, { type: "listen.closed" }>;
    expect([closed.principal, closed.sessionId, closed.targets]).toEqual(["p", "l1", []]);
  });
});
