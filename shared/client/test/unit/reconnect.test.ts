import { ProtocolError, type ReadResourceResult } from "@modelcontextprotocol/client";
import { afterEach, describe, expect, it } from "vitest";
import type { BrokerClient } from "../../src/index.js";
import { STABLE_STREAM_MS } from "../../src/subscriptions/listen-stream.js";
import { firstText, nextEvent, record } from "../helpers/events.js";
import type { ManualClock } from "../helpers/manual-clock.js";
import type { TestBackend } from "../helpers/test-backend.js";
import { breakListenStream, toolListChangeHeard, unitSetup } from "../helpers/unit-client.js";

/*
 * Backoff with the unit setup's policy (100 ms initial, ×2, 1 s cap) and jitter fixed at 0.5:
 * attempt n waits capped/2 + capped/4, i.e. 75, 150, 300, 600, 750, 750 … ms. Pending
 * subscriptions are retried after 750, 1500, 3000 … ms (1 s initial, ×2). A broken listen
 * stream is reopened after 188, 375 … ms.
 */


/** Drops the connection of `era` from the server side and resolves once the client is reconnecting. */
async function dropConnection(backend: TestBackend, client: BrokerClient, era: "legacy" | "modern"): Promise<{ up(): void }> {
  const reconnecting = nextEvent(client, "connectionChange", (d) => d.state === "reconnecting");
  let restart = { up: (): void => undefined };
  if (era === "legacy") await backend.dropLegacyConnections();
  else restart = await backend.restartModern();
  await reconnecting;
  return restart;
}

/** Lets the first reconnect attempt run and resolves once the client is connected again. */
async function reconnect(client: BrokerClient, clock: ManualClock): Promise<void> {
  const connected = nextEvent(client, "connectionChange", (d) => d.state === "connected");
  await clock.advance(75);
  await connected;
}

describe("reconnect (legacy)", () => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("reconnects with capped exponential backoff, then restores subscriptions and reloads lists by itself", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.readResource("test://two");
    const states = record(c, "connectionChange");

    backend.legacyDown = true;
    await dropConnection(backend, c, "legacy");
    expect(states[0]).toMatchObject({ state: "reconnecting", attempt: 0, error: { code: "CONNECTION_LOST" } });
    expect(clock.pendingDelays()).toEqual([75]);
    // While waiting: subscriptions and cached content are kept; requests are refused.
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
    expect(await updated).toEqual({ uri: "test://one", reason: "resync" });
    expect(c.cache.getResource("test://two")).not.toBeNull();

    // And updates flow again.
    const next = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await next).toEqual({ uri: "test://one", reason: "notification" });
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
    await dropConnection(backend, c, "legacy");
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
    await dropConnection(backend, c, "legacy");
    await reconnect(c, clock);
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
    await dropConnection(backend, c, "legacy");
    await reconnect(c, clock);
    expect(await refusal).toMatchObject({ operation: "resubscribe test://one" });
    expect(c.getSubscribedResources()).toEqual(["test://one"]);
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);

    backend.unknownUris.delete("test://one");
    const active = nextEvent(c, "resourceSubscriptionsChange", (d) => d.pending.length === 0);
    const updated = nextEvent(c, "resourceUpdated");
    backend.listChanged("resources");
    await clock.timerSet(100);
    await clock.advance(100);
    expect(await active).toEqual({ uris: ["test://one"], pending: [] });
    expect(await updated).toEqual({ uri: "test://one", reason: "resync" });
    expect(backend.legacySubscriptions()).toEqual([["test://one"]]);
  });

  it("retries pending subscriptions with backoff even when the server never announces a list change", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    backend.unknownUris.add("test://one");
    await dropConnection(backend, c, "legacy");
    await reconnect(c, clock);
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);
    // Subscribed once, refused on restore, and again by the retry after the reconnect's list load.
    await backend.whenReceived("resources/subscribe", 3);
    const tries = backend.count("resources/subscribe");
    await clock.timerSet(750);
    await clock.advance(750);
    await backend.whenReceived("resources/subscribe", tries + 1);
    // Still refused: the next try waits longer.
    await clock.timerSet(1_500);

    backend.unknownUris.delete("test://one");
    const updated = nextEvent(c, "resourceUpdated");
    await clock.advance(1_500);
    expect(await updated).toEqual({ uri: "test://one", reason: "resync" });
    expect(c.getPendingResourceSubscriptions()).toEqual([]);
    expect(backend.legacySubscriptions()).toEqual([["test://one"]]);
    // Nothing is pending any more: no further tries.
    await clock.advance(60_000);
    expect(backend.count("resources/subscribe")).toBe(tries + 2);
  });

  it("unsubscribing while reconnecting takes the URI out of what is restored", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    await dropConnection(backend, c, "legacy");
    await c.unsubscribeFromResource("test://one");
    await reconnect(c, clock);
    expect(backend.legacySubscriptions()).toEqual([["test://two"]]);
  });

  it("unsubscribing while the subscriptions are being restored unsubscribes on the new connection", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    await dropConnection(backend, c, "legacy");
    const release = backend.hold("resources/subscribe");
    const before = backend.count("resources/subscribe");
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    await clock.advance(75);
    await backend.whenReceived("resources/subscribe", before + 1);
    expect(c.state).toBe("reconnecting");
    const unsubscribed = c.unsubscribeFromResource("test://one");
    release();
    await unsubscribed;
    await connected;
    expect(c.getSubscribedResources()).toEqual(["test://two"]);
    expect(backend.legacySubscriptions()).toEqual([["test://two"]]);
  });

  it("keeps cached content whose re-read the dropped connection cut short, reports the update as resourceUpdated, and re-reads it after the reconnect", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.subscribeToResource("test://one");
    const reads = backend.count("resources/read");
    backend.holdNext("resources/read");
    const contents = record(c, "resourceContentChange");
    const order: string[] = [];
    c.on("resourceUpdated", ({ uri, reason }) => order.push(`updated ${uri} ${reason}`));
    c.on("error", ({ operation }) => order.push(`error ${operation}`));
    const failed = nextEvent(c, "error", (d) => d.operation === "re-read test://one");
    backend.updated("test://one");
    await backend.whenReceived("resources/read", reads + 1);
    await dropConnection(backend, c, "legacy");
    // No answer, not a JSON-RPC error: the content may well be unchanged, but the update is not lost.
    expect((await failed).error).not.toBeInstanceOf(ProtocolError);
    expect(order).toEqual(["updated test://one notification", "error re-read test://one"]);
    expect(contents).toEqual([]);
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v1");

    backend.texts.set("test://one", "one v2");
    const reread = nextEvent(c, "resourceContentChange");
    await reconnect(c, clock);
    const detail = await reread;
    expect(detail).toMatchObject({ cause: "update", reason: "resync", source: "resource", uri: "test://one" });
    expect(firstText(detail.entry?.content)).toBe("one v2");
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v2");
    // The resync of cached content came as its content alone.
    expect(order).toEqual(["updated test://one notification", "error re-read test://one"]);
  });

  it("disconnect() while reconnecting stops the attempts", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    backend.legacyDown = true;
    await dropConnection(backend, c, "legacy");
    await c.disconnect();
    const attempts = backend.legacyAttempts;
    await clock.advance(10_000);
    expect(backend.legacyAttempts).toBe(attempts);
    expect(c.state).toBe("disconnected");
  });

  it("disconnect() during a reconnect attempt under way closes its connection and stops", async () => {
    const { backend, clock, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    await dropConnection(backend, c, "legacy");
    backend.legacySilent = true;
    const handshakes = backend.wireCount("initialize");
    await clock.advance(75);
    await backend.whenWire("initialize", handshakes + 1);
    expect(c.state).toBe("reconnecting");
    const states = record(c, "connectionChange");
    // The attempt's initialize may have made a session: disconnect() gives it up to 2 s to be answered, so it can be ended.
    const disconnecting = c.disconnect();
    await clock.advance(2_000);
    await disconnecting;
    const attempts = backend.legacyAttempts;
    await clock.advance(10_000);
    expect(backend.legacyAttempts).toBe(attempts);
    expect(states.map((s) => s.state)).toEqual(["disconnected"]);
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

describe.each(["legacy", "modern"] as const)("connection set-up (%s)", (era) => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("disconnect() aborts a connect under way at once: CONNECT_ABORTED", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    // A server that accepted the connection and never answers the handshake.
    if (era === "legacy") backend.legacySilent = true;
    else backend.hold("server/discover");
    const states = record(c, "connectionChange");
    const connecting = c.connect();
    await backend.whenWire(era === "legacy" ? "initialize" : "server/discover", 1);
    const disconnecting = c.disconnect();
    await expect(connecting).rejects.toMatchObject({ name: "BrokerClientError", code: "CONNECT_ABORTED" });
    // A legacy initialize may have made a session: disconnect() waits up to 2 s for its answer, to end it.
    if (era === "legacy") await clock.advance(2_000);
    await disconnecting;
    expect(c.state).toBe("disconnected");
    expect(states.map((s) => s.state)).toEqual(["connecting", "disconnected"]);
  });

  it("lets the listeners of the events fired while connecting and reconnecting use the client", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    const seen: { state: string; era: string | undefined }[] = [];
    const reads: Promise<ReadResourceResult>[] = [];
    c.on("toolsChange", () => {
      seen.push({ state: c.state, era: c.era });
      reads.push(c.readResource("test://one"));
    });
    await c.connect();
    expect(seen).toEqual([{ state: "connecting", era }]);
    expect(firstText(await reads[0])).toBe("one v1");

    const restart = await dropConnection(backend, c, era);
    restart.up();
    await reconnect(c, clock);
    expect(seen[1]).toEqual({ state: "reconnecting", era });
    expect(firstText(await reads[1])).toBe("one v1");
  });

  it("stops setting up a reconnected connection when a listener disconnects during the restore", async () => {
    const { backend, clock, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    backend.unknownUris.add("test://one");
    c.on("error", () => void c.disconnect());
    const lists = record(c, "toolsChange");
    const restart = await dropConnection(backend, c, era);
    restart.up();
    const ended = nextEvent(c, "connectionChange", (d) => d.state === "disconnected");
    await clock.advance(75);
    await ended;
    await clock.advance(60_000);
    // No list loaded into the cleared client, no retry left behind.
    expect(lists).toEqual([]);
    expect(c.getTools()).toEqual([]);
    expect(c.getSubscribedResources()).toEqual([]);
    expect(clock.pendingDelays()).toEqual([]);
    expect(c.state).toBe("disconnected");
  });

  it("probes the server only after a heartbeat interval without hearing from it", async () => {
    const { backend, clock, client: c } = unitSetup(era, {
      // Nothing to listen for on a modern connection: no stream that could break.
      listChangedNotifications: { tools: false, prompts: false, resources: false },
      reconnect: { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2, heartbeatIntervalMs: 5_000 },
    });
    client = c;
    const probe = era === "legacy" ? "ping" : "server/discover";
    await c.connect();
    const probes = backend.wireCount(probe);
    await clock.advance(3_000);
    await c.callTool("echo"); // the server answered: alive at 3 s
    await clock.advance(2_000);
    expect(backend.wireCount(probe)).toBe(probes);
    await clock.advance(3_000);
    await backend.whenWire(probe, probes + 1);
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
    const restart = await dropConnection(backend, c, "modern");
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
    const updated = nextEvent(c, "resourceUpdated", (d) => d.reason === "notification");
    backend.updated("test://one");
    expect(await updated).toEqual({ uri: "test://one", reason: "notification" });
  });

  it("hears a list change made while the listen stream opens, on connect and on reconnect", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    let release = backend.holdNext("subscriptions/listen");
    const connecting = c.connect();
    await backend.whenReceived("subscriptions/listen", 1);
    backend.tools.set("added", { name: "added", run: () => ({ content: [] }) });
    backend.listChanged("tools");
    release();
    await connecting;
    expect(c.getTools().map((t) => t.name)).toContain("added");

    const restart = await dropConnection(backend, c, "modern");
    restart.up();
    release = backend.holdNext("subscriptions/listen");
    const listens = backend.count("subscriptions/listen");
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    await clock.advance(75);
    await backend.whenReceived("subscriptions/listen", listens + 1);
    backend.tools.delete("added");
    backend.listChanged("tools");
    release();
    await connected;
    expect(c.getTools().map((t) => t.name)).not.toContain("added");
  });

  it("keeps a URI the server rejects on restore pending (data.uri names it), and restores the rest", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    backend.unknownUris.add("test://one");
    const refusal = nextEvent(c, "error", (d) => d.operation === "resubscribe test://one");
    const restart = await dropConnection(backend, c, "modern");
    restart.up();
    const before = backend.listenFilters.length;
    await reconnect(c, clock);
    expect(await refusal).toMatchObject({ error: { code: -32602 } });
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);
    // One rejected request, then the rest alone.
    expect(backend.listenFilters.slice(before, before + 2).map((f) => f.resourceSubscriptions)).toEqual([["test://one", "test://two"], ["test://two"]]);

    backend.unknownUris.delete("test://one");
    const updated = nextEvent(c, "resourceUpdated", (d) => d.uri === "test://one");
    backend.listChanged("resources");
    await clock.timerSet(100);
    await clock.advance(100);
    expect(await updated).toEqual({ uri: "test://one", reason: "resync" });
    expect(c.getPendingResourceSubscriptions()).toEqual([]);
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://two", "test://one"]);
  });

  it("keeps the connection when a restore is rejected without naming a URI: each is retried on its own", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    backend.unknownUris.add("test://two");
    backend.listenRejectionNamesUri = false;
    const restart = await dropConnection(backend, c, "modern");
    restart.up();
    // Both wait as pending; the retry after the list load gets test://one accepted.
    const sorted = nextEvent(c, "resourceSubscriptionsChange", (d) => d.pending.length === 1);
    const resync = nextEvent(c, "resourceUpdated", (d) => d.uri === "test://one");
    await reconnect(c, clock);
    expect(await sorted).toEqual({ uris: ["test://one", "test://two"], pending: ["test://two"] });
    expect(await resync).toMatchObject({ reason: "resync" });
    expect(c.state).toBe("connected");

    // The stream serves test://one and the list changes.
    const updated = nextEvent(c, "resourceUpdated", (d) => d.reason === "notification");
    backend.updated("test://one");
    expect(await updated).toMatchObject({ uri: "test://one" });
    await toolListChangeHeard({ backend, clock, client: c });
  });

  it("reopens a listen stream that broke with backoff, and reports what may have been missed", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const listens = backend.count("subscriptions/listen");
    const updated = nextEvent(c, "resourceUpdated");
    expect(backend.cutListenStreams()).toBeGreaterThanOrEqual(1);
    // The first reopen waits 250/2 + 125 × 0.5 ms.
    await clock.timerSet(188);
    await clock.advance(187);
    expect(backend.count("subscriptions/listen")).toBe(listens);
    await clock.advance(1);
    await backend.whenReceived("subscriptions/listen", listens + 1);
    expect(await updated).toEqual({ uri: "test://one", reason: "resync" });
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://one"]);
    expect(c.state).toBe("connected");
    const next = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await next).toEqual({ uri: "test://one", reason: "notification" });
  });

  it("backs off further while a broken listen stream cannot be reopened, its URIs pending meanwhile", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    backend.failing.add("subscriptions/listen");
    backend.cutListenStreams();
    await clock.timerSet(188);
    const listens = backend.count("subscriptions/listen");
    const refusal = nextEvent(c, "error", (d) => d.operation === "resubscribe test://one");
    await clock.advance(188);
    // The rejection names no URI: they are all left out, and a stream without them fails too.
    await backend.whenReceived("subscriptions/listen", listens + 2);
    expect(backend.listenFilters.slice(-2).map((f) => f.resourceSubscriptions)).toEqual([["test://one"], undefined]);
    expect(await refusal).toMatchObject({ error: { code: -32603 } });
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);
    // Attempt 1 waits 500/2 + 250 × 0.5 ms; the server answered, so the connection stays.
    await clock.timerSet(375);
    expect(c.state).toBe("connected");
    backend.failing.delete("subscriptions/listen");
    const updated = nextEvent(c, "resourceUpdated");
    await clock.advance(375);
    await backend.whenReceived("subscriptions/listen", listens + 3);
    // The reopened stream reloads the lists, and the reload retries the pending URI.
    await clock.advance(100);
    expect(await updated).toEqual({ uri: "test://one", reason: "resync" });
    expect(c.getPendingResourceSubscriptions()).toEqual([]);
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://one"]);
  });

  it("reopens a broken listen stream without a URI the server no longer knows: it waits as pending, the rest flows", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    backend.unknownUris.add("test://one");
    const refusal = nextEvent(c, "error", (d) => d.operation === "resubscribe test://one");
    const resync = nextEvent(c, "resourceUpdated", (d) => d.reason === "resync");
    const listens = backend.count("subscriptions/listen");
    await breakListenStream({ backend, clock });
    expect(await refusal).toMatchObject({ error: { code: -32602, data: { uri: "test://one" } } });
    // One rejected request, then the rest alone; not again and again.
    expect(backend.listenFilters.slice(listens).map((f) => f.resourceSubscriptions)).toEqual([["test://one", "test://two"], ["test://two"]]);
    expect(c.getSubscribedResources()).toEqual(["test://one", "test://two"]);
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);
    // Only what the stream still serves is resynced.
    expect(await resync).toEqual({ uri: "test://two", reason: "resync" });

    const updated = nextEvent(c, "resourceUpdated", (d) => d.reason === "notification");
    backend.updated("test://two");
    expect(await updated).toEqual({ uri: "test://two", reason: "notification" });
    backend.tools.set("new", { name: "new", run: () => ({ content: [] }) });
    await toolListChangeHeard({ backend, clock, client: c });
    expect(c.getTools().map((t) => t.name)).toContain("new");
    expect(c.state).toBe("connected");
  });

  it("reopens a broken listen stream without URIs when the rejection names none, so the list changes still flow", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    backend.unknownUris.add("test://two");
    backend.listenRejectionNamesUri = false;
    const refusals = record(c, "error");
    const listens = backend.count("subscriptions/listen");
    // The reload after the reopen retries each pending URI on its own: test://one is accepted.
    const sorted = nextEvent(c, "resourceSubscriptionsChange", (d) => d.pending.length === 1);
    await breakListenStream({ backend, clock });
    await backend.whenReceived("subscriptions/listen", listens + 2);
    expect(backend.listenFilters.slice(listens, listens + 2).map((f) => f.resourceSubscriptions)).toEqual([["test://one", "test://two"], undefined]);
    expect(refusals.map((r) => r.operation)).toEqual(["resubscribe test://one", "resubscribe test://two"]);
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one", "test://two"]);
    await clock.advance(100);
    expect(await sorted).toEqual({ uris: ["test://one", "test://two"], pending: ["test://two"] });

    await toolListChangeHeard({ backend, clock, client: c });
    expect(c.state).toBe("connected");
  });

  it("resets the reopening backoff only after a stream stayed open a while", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    /** Cuts the stream and resolves with the delay of its reopening. */
    const cut = async (): Promise<number> => {
      const listens = backend.count("subscriptions/listen");
      expect(backend.cutListenStreams()).toBe(1);
      await Promise.race([188, 375, 750].map((delay) => clock.timerSet(delay)));
      const delay = clock.pendingDelays().find((d) => [188, 375, 750].includes(d)) ?? -1;
      await clock.advance(delay);
      await backend.whenReceived("subscriptions/listen", listens + 1);
      return delay;
    };
    // A server that ends each stream right after accepting it: the delays grow.
    expect(await cut()).toBe(188);
    expect(await cut()).toBe(375);
    expect(await cut()).toBe(750);
    // A stream that stayed open long enough starts the backoff over.
    await clock.advance(STABLE_STREAM_MS);
    expect(await cut()).toBe(188);
  });

  it("unsubscribing while the subscriptions are being restored narrows the new stream", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    const restart = await dropConnection(backend, c, "modern");
    restart.up();
    const release = backend.hold("subscriptions/listen");
    const listens = backend.count("subscriptions/listen");
    const connected = nextEvent(c, "connectionChange", (d) => d.state === "connected");
    await clock.advance(75);
    await backend.whenReceived("subscriptions/listen", listens + 1);
    expect(c.state).toBe("reconnecting");
    const unsubscribed = c.unsubscribeFromResource("test://one");
    release();
    await unsubscribed;
    await connected;
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://two"]);
  });

  it("notices a silent drop with the heartbeat", async () => {
    const { backend, clock, client: c } = unitSetup("modern", {
      listChangedNotifications: { tools: false, prompts: false, resources: false },
      reconnect: { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2, heartbeatIntervalMs: 5_000 },
    });
    client = c;
    await c.connect();
    expect(backend.count("subscriptions/listen")).toBe(0);
    await backend.restartModern();
    await clock.advance(4_999);
    expect(c.state).toBe("connected");
    const reconnecting = nextEvent(c, "connectionChange", (d) => d.state === "reconnecting");
    await clock.advance(1);
    await reconnecting;
  });
});
