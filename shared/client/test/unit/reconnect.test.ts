import { afterEach, describe, expect, it } from "vitest";
import type { BrokerClient } from "../../src/index.js";
import { eventually, nextEvent, record } from "../helpers/events.js";
import { unitSetup } from "../helpers/unit-client.js";

/*
 * Backoff with the unit setup's policy (100 ms initial, ×2, 1 s cap) and jitter fixed at 0.5:
 * attempt n waits capped/2 + capped/4, i.e. 75, 150, 300, 600, 750, 750 … ms.
 */

describe("reconnect (legacy)", () => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("reconnects with capped exponential backoff, then reloads lists and re-subscribes by itself", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.readResource("test://two");
    const states = record(c, "connectionChange");

    backend.legacyDown = true;
    await backend.dropLegacyConnections();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    expect(states[0]).toMatchObject({ state: "reconnecting", attempt: 0, error: { code: "CONNECTION_LOST" } });
    expect(clock.pendingDelays()).toEqual([75]);
    // While reconnecting: subscriptions and cached content are kept; requests are refused.
    expect(c.getSubscribedResources()).toEqual(["test://one"]);
    expect(c.cache.getResource("test://two")).not.toBeNull();
    await expect(c.subscribeToResource("test://two")).rejects.toMatchObject({ code: "NOT_CONNECTED" });

    const attempts = backend.legacyAttempts;
    await clock.advance(74);
    expect(backend.legacyAttempts).toBe(attempts);
    await clock.advance(1);
    expect(backend.legacyAttempts).toBe(attempts + 1);
    expect(clock.pendingDelays()).toEqual([150]);
    await clock.advance(150);
    expect(clock.pendingDelays()).toEqual([300]);
    expect(states.map((s) => s.attempt)).toEqual([0, 1, 2]);

    backend.legacyDown = false;
    backend.tools.set("new", { name: "new", run: () => ({ content: [] }) });
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    const tools = nextEvent(c, "toolsChange");
    const updated = nextEvent(c, "resourceUpdated");
    await clock.advance(300);
    await connected;
    expect((await tools).tools.map((t) => t.name)).toContain("new");
    expect(backend.legacySubscriptions()).toEqual([["test://one"]]);
    // Updates sent while away are lost: each restored subscription is reported updated once.
    expect(await updated).toEqual({ uri: "test://one" });
    expect(c.cache.getResource("test://two")).not.toBeNull();

    // And updates flow again.
    const next = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await next).toEqual({ uri: "test://one" });
  });

  it("gives up after maxAttempts and ends disconnected, cleared, with the error", async () => {
    const { backend, clock, client: c } = unitSetup("legacy", {
      reconnect: { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2, maxAttempts: 2, heartbeatIntervalMs: 0 },
    });
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.callTool("echo");
    backend.legacyDown = true;
    await backend.dropLegacyConnections();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    const ended = nextEvent(c, "connectionChange", (d) => d.state === "disconnected");
    await clock.advance(75 + 150);
    expect((await ended).error).toBeInstanceOf(TypeError);
    expect(c.state).toBe("disconnected");
    expect(c.getSubscribedResources()).toEqual([]);
    expect(c.cache.getToolCallResult("echo")).toBeNull();
    expect(clock.pendingDelays()).toEqual([]);
  });

  it("with reconnect: false, a drop ends the client", async () => {
    const { backend, client: c } = unitSetup("legacy", { reconnect: false });
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const ended = nextEvent(c, "connectionChange", (d) => d.state === "disconnected");
    await backend.dropLegacyConnections();
    expect((await ended).error).toMatchObject({ code: "CONNECTION_LOST" });
    expect(c.getSubscribedResources()).toEqual([]);
  });

  it("with resubscribeOnReconnect: false, a reconnect starts without subscriptions", async () => {
    const { backend, clock, client: c } = unitSetup("legacy", { resubscribeOnReconnect: false });
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const changes = record(c, "resourceSubscriptionsChange");
    await backend.dropLegacyConnections();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    await clock.advance(75);
    await connected;
    expect(c.getSubscribedResources()).toEqual([]);
    expect(changes).toEqual([{ uris: [], pending: [] }]);
    expect(backend.legacySubscriptions()).toEqual([[]]);
  });

  it("keeps a subscription the server refuses on reconnect pending, and retries it after the resource list reloads", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    // The restarted server does not know the URI yet (a broker whose backend is still starting).
    backend.unknownUris.add("test://one");
    const refusal = nextEvent(c, "error");
    await backend.dropLegacyConnections();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    await clock.advance(75);
    expect(await refusal).toMatchObject({ operation: "resubscribe test://one" });
    expect(c.state).toBe("connected");
    expect(c.getSubscribedResources()).toEqual(["test://one"]);
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);

    backend.unknownUris.delete("test://one");
    const active = nextEvent(c, "resourceSubscriptionsChange", (d) => d.pending.length === 0);
    const updated = nextEvent(c, "resourceUpdated");
    backend.listChanged("resources");
    await eventually(() => clock.pendingDelays().includes(100), "the debounce timer");
    await clock.advance(100);
    expect(await active).toEqual({ uris: ["test://one"], pending: [] });
    expect(await updated).toEqual({ uri: "test://one" });
    expect(backend.legacySubscriptions()).toEqual([["test://one"]]);
  });

  it("unsubscribing while reconnecting takes the URI out of what is restored", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    await backend.dropLegacyConnections();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    await c.unsubscribeFromResource("test://one");
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    await clock.advance(75);
    await connected;
    expect(backend.legacySubscriptions()).toEqual([["test://two"]]);
  });

  it("disconnect() while reconnecting stops the attempts", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    backend.legacyDown = true;
    await backend.dropLegacyConnections();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    await c.disconnect();
    const attempts = backend.legacyAttempts;
    await clock.advance(10_000);
    expect(backend.legacyAttempts).toBe(attempts);
    expect(c.state).toBe("disconnected");
  });

  it("rejects a first connect that fails, and a second connect while connected", async () => {
    const { backend, client: c } = unitSetup("legacy");
    client = c;
    backend.legacyDown = true;
    await expect(c.connect()).rejects.toBeInstanceOf(TypeError);
    expect(c.state).toBe("disconnected");
    backend.legacyDown = false;
    await c.connect();
    await expect(c.connect()).rejects.toMatchObject({ code: "ALREADY_CONNECTED" });
  });
});

describe("reconnect (modern)", () => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("notices a server restart through the listen stream, reconnects and reopens it with the subscriptions", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const restart = await backend.restartModern();
    await eventually(() => c.state === "reconnecting", "reconnecting");
    expect(clock.pendingDelays()).toEqual([75]);
    await clock.advance(75);
    expect(clock.pendingDelays()).toEqual([150]);

    restart.up();
    const listens = backend.count("subscriptions/listen");
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    await clock.advance(150);
    await connected;
    expect(backend.count("subscriptions/listen")).toBe(listens + 1);
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://one"]);
    const updated = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await updated).toEqual({ uri: "test://one" });
  });

  it("reopens a listen stream that broke with backoff, and reports what may have been missed", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const listens = backend.count("subscriptions/listen");
    const updated = nextEvent(c, "resourceUpdated");
    expect(backend.cutListenStreams()).toBe(1);
    // The first reopen waits 250/2 + 125 × 0.5 ms.
    await eventually(() => clock.pendingDelays().includes(188), "the reopen timer");
    await clock.advance(187);
    expect(backend.count("subscriptions/listen")).toBe(listens);
    await clock.advance(1);
    await eventually(() => backend.count("subscriptions/listen") === listens + 1, "the reopened stream");
    expect(await updated).toEqual({ uri: "test://one" });
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://one"]);
    expect(c.state).toBe("connected");
    const next = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await next).toEqual({ uri: "test://one" });
  });

  it("backs off further while a broken listen stream cannot be reopened", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    backend.failing.add("subscriptions/listen");
    backend.cutListenStreams();
    await eventually(() => clock.pendingDelays().includes(188), "the first reopen timer");
    const listens = backend.count("subscriptions/listen");
    await clock.advance(188);
    await eventually(() => backend.count("subscriptions/listen") === listens + 1, "the failed reopen");
    // Attempt 1 waits 500/2 + 250 × 0.5 ms; the server answered, so the connection stays.
    await eventually(() => clock.pendingDelays().includes(375), "the second reopen timer");
    expect(c.state).toBe("connected");
    backend.failing.delete("subscriptions/listen");
    const updated = nextEvent(c, "resourceUpdated");
    await clock.advance(375);
    expect(await updated).toEqual({ uri: "test://one" });
    expect(backend.count("subscriptions/listen")).toBe(listens + 2);
  });

  it("notices a silent drop with the heartbeat", async () => {
    const { backend, clock, client: c } = unitSetup("modern", {
      // Nothing to listen for: no stream that could break.
      listChangedNotifications: { tools: false, prompts: false, resources: false },
      reconnect: { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2, heartbeatIntervalMs: 5_000 },
    });
    client = c;
    await c.connect();
    expect(backend.count("subscriptions/listen")).toBe(0);
    await backend.restartModern();
    await clock.advance(4_999);
    expect(c.state).toBe("connected");
    await clock.advance(1);
    await eventually(() => c.state === "reconnecting", "reconnecting");
  });
});
