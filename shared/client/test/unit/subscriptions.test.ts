import { ProtocolError } from "@modelcontextprotocol/client";
import { afterEach, describe, expect, it } from "vitest";
import type { BrokerClient } from "../../src/index.js";
import { ResourceSubscriptions } from "../../src/subscriptions/resource-subscriptions.js";
import type { SubscriptionChannel } from "../../src/subscriptions/subscription-channel.js";
import { firstText, nextEvent, record } from "../helpers/events.js";
import { settle } from "../helpers/manual-clock.js";
import type { TestBackend } from "../helpers/test-backend.js";
import { breakListenStream, unitSetup, type UnitSetup } from "../helpers/unit-client.js";

/** What the server side holds for this client: legacy subscriptions, or the last listen filter's URIs. */
function serverSide(backend: TestBackend, era: "legacy" | "modern"): string[] {
  if (era === "legacy") return backend.legacySubscriptions().flat();
  return backend.listenFilters.at(-1)?.resourceSubscriptions ?? [];
}

describe.each(["legacy", "modern"] as const)("resource subscriptions (%s)", (era) => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  /** A connected client that read `test://one` (so its content is cached) and subscribed to it. */
  async function cachedAndSubscribed(): Promise<UnitSetup> {
    const setup = unitSetup(era);
    client = setup.client;
    await setup.client.connect();
    await setup.client.readResource("test://one");
    await setup.client.subscribeToResource("test://one");
    return setup;
  }

  it("rejects with NOT_CONNECTED before connect", async () => {
    const { client: c } = unitSetup(era);
    client = c;
    expect(c.supportsResourceSubscriptions()).toBe(false);
    await expect(c.subscribeToResource("test://one")).rejects.toMatchObject({ name: "BrokerClientError", code: "NOT_CONNECTED" });
    expect(c.getSubscribedResources()).toEqual([]);
  });

  it("rejects with CAPABILITY_MISSING when the server cannot subscribe", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    backend.subscribeCapability = false;
    await c.connect();
    expect(c.supportsResourceSubscriptions()).toBe(false);
    await expect(c.subscribeToResource("test://one")).rejects.toMatchObject({ code: "CAPABILITY_MISSING", data: { capability: "resources.subscribe" } });
  });

  it("subscribes and unsubscribes on the server, mirroring the set", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    expect(c.supportsResourceSubscriptions()).toBe(true);
    const changes = record(c, "resourceSubscriptionsChange");
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    await c.subscribeToResource("test://one"); // already subscribed: nothing sent
    expect(c.getSubscribedResources()).toEqual(["test://one", "test://two"]);
    expect(c.isSubscribedToResource("test://two")).toBe(true);
    expect(serverSide(backend, era)).toEqual(["test://one", "test://two"]);
    if (era === "legacy") expect(backend.count("resources/subscribe")).toBe(2);
    else expect(backend.listenFilters.at(-1)).toEqual({ toolsListChanged: true, promptsListChanged: true, resourcesListChanged: true, resourceSubscriptions: ["test://one", "test://two"] });

    await c.unsubscribeFromResource("test://one");
    await c.unsubscribeFromResource("test://nope"); // not subscribed: a no-op
    expect(c.getSubscribedResources()).toEqual(["test://two"]);
    expect(c.isSubscribedToResource("test://one")).toBe(false);
    expect(serverSide(backend, era)).toEqual(["test://two"]);
    expect(changes.map((change) => change.uris)).toEqual([["test://one"], ["test://one", "test://two"], ["test://two"]]);
  });

  it("reports an update of an uncached resource as resourceUpdated only", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const contents = record(c, "resourceContentChange");
    const reads = backend.count("resources/read");
    const updated = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await updated).toEqual({ uri: "test://one", reason: "notification" });
    await settle();
    expect(contents).toEqual([]);
    expect(backend.count("resources/read")).toBe(reads);
  });

  it("reports an update of cached content as the re-read content (cause update), without resourceUpdated", async () => {
    const { backend, client: c } = await cachedAndSubscribed();
    const updates = record(c, "resourceUpdated");
    backend.texts.set("test://one", "one v2");
    const change = nextEvent(c, "resourceContentChange");
    backend.updated("test://one");
    const detail = await change;
    expect(detail).toMatchObject({ cause: "update", reason: "notification", source: "resource", uri: "test://one" });
    expect(firstText(detail.entry?.content)).toBe("one v2");
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v2");
    await settle();
    expect(updates).toEqual([]);
  });

  it("re-reads every entry holding an updated URI once, the direct one first, each with cause update", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://items/5");
    await c.readResourceFromTemplate("test://items/{id}", { id: "5" });
    await c.subscribeToResource("test://items/5");
    const updates = record(c, "resourceUpdated");
    const contents = record(c, "resourceContentChange");
    const reads = backend.count("resources/read");
    backend.templateText = () => "item 5, changed";
    const second = nextEvent(c, "resourceContentChange", (d) => d.source === "template");
    backend.updated("test://items/5");
    await second;
    expect(contents.map(({ cause, source, uri }) => ({ cause, source, uri }))).toEqual([
      { cause: "update", source: "resource", uri: "test://items/5" },
      { cause: "update", source: "template", uri: "test://items/5" },
    ]);
    expect(contents.map((d) => firstText(d.entry?.content))).toEqual(["item 5, changed", "item 5, changed"]);
    expect(backend.count("resources/read")).toBe(reads + 1);
    expect(c.cache.getResourceTemplate("test://items/{id}")?.params).toEqual({ id: "5" });
    expect(updates).toEqual([]);
  });

  it("drops cached content whose re-read the server answers with an error, and says why (cause update, no resourceUpdated)", async () => {
    const { backend, client: c } = await cachedAndSubscribed();
    const updates = record(c, "resourceUpdated");
    const errors = record(c, "error");
    backend.texts.delete("test://one");
    const change = nextEvent(c, "resourceContentChange");
    backend.updated("test://one");
    const detail = await change;
    expect(detail).toMatchObject({ cause: "update", reason: "notification", source: "resource", entry: null });
    expect(detail.error).toBeInstanceOf(ProtocolError);
    expect(c.cache.getResource("test://one")).toBeNull();
    await settle();
    expect(updates).toEqual([]);
    expect(errors).toEqual([]);
  });

  it("reports an update as resourceUpdated when its re-read has no entry left to announce (cleared meanwhile)", async () => {
    const { backend, client: c } = await cachedAndSubscribed();
    const contents = record(c, "resourceContentChange");
    const reads = backend.count("resources/read");
    const release = backend.holdNext("resources/read");
    const updated = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    await backend.whenReceived("resources/read", reads + 1);
    c.cache.clearResource("test://one");
    release();
    expect(await updated).toEqual({ uri: "test://one", reason: "notification" });
    expect(contents).toEqual([]);
    expect(c.cache.getResource("test://one")).toBeNull();
  });

  it("stops delivering updates after unsubscribing", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    await c.unsubscribeFromResource("test://one");
    const updates = record(c, "resourceUpdated");
    // The server may still send test://one (the modern old stream may not be gone yet); the client ignores it.
    const delivered = backend.delivered("notifications/resources/updated");
    backend.updated("test://one");
    backend.updated("test://two");
    await nextEvent(c, "resourceUpdated");
    await delivered;
    await settle();
    expect(updates).toEqual([{ uri: "test://two", reason: "notification" }]);
  });
});

describe("legacy resource subscriptions", () => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("rejects a subscription the server refuses and leaves the set as it was", async () => {
    const { backend, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    backend.unknownUris.add("test://ghost");
    await expect(c.subscribeToResource("test://ghost")).rejects.toBeInstanceOf(ProtocolError);
    expect(c.getSubscribedResources()).toEqual([]);
    // And its updates, should the server send any, are not ours.
    backend.updateOnSubscribe = true;
    await c.subscribeToResource("test://one");
    expect(c.getSubscribedResources()).toEqual(["test://one"]);
  });

  it("delivers an update the server sends before it answers the subscribe", async () => {
    const { backend, client: c } = unitSetup("legacy");
    client = c;
    await c.connect();
    backend.updateOnSubscribe = true;
    const updates = record(c, "resourceUpdated");
    const changes = record(c, "resourceSubscriptionsChange");
    await c.subscribeToResource("test://one");
    expect(updates).toEqual([{ uri: "test://one", reason: "notification" }]);
    // While it was being subscribed the URI was heard, not yet listed.
    expect(changes).toEqual([{ uris: ["test://one"], pending: [] }]);
  });
});

describe("modern resource subscriptions (one listen stream)", () => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
  });

  it("does not wait for the old stream's cancel, and hears an update on the new stream at once", async () => {
    const { backend, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    // Subscribing replaced the stream opened on connect; its cancel goes out in the background.
    await backend.whenWire("notifications/cancelled", 1);
    // The cancel of the next replaced stream takes as long as the test wants (a slow network).
    const releaseCancel = backend.hold("notifications/cancelled");
    const updates = record(c, "resourceUpdated");
    let subscribed = false;
    const subscribing = c.subscribeToResource("test://two").then(() => (subscribed = true));
    // The new stream is acknowledged and the old one is being cancelled.
    await backend.whenWire("notifications/cancelled", 2);
    const delivered = backend.delivered("notifications/resources/updated");
    backend.updated("test://two");
    await delivered;
    expect(updates).toEqual([{ uri: "test://two", reason: "notification" }]);
    await settle();
    expect(subscribed).toBe(true);
    await subscribing;
    expect(c.getSubscribedResources()).toEqual(["test://one", "test://two"]);
    releaseCancel();
  });

  it("rejects a URI the server leaves out of the honored subset, and no later stream asks for it", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    backend.unhonoredUris.add("test://ghost");
    await expect(c.subscribeToResource("test://ghost")).rejects.toMatchObject({ name: "BrokerClientError", code: "SUBSCRIPTION_REFUSED", data: { uri: "test://ghost" } });
    expect(c.getSubscribedResources()).toEqual(["test://one"]);
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://one", "test://ghost"]);

    // The stream breaks: the reopened one asks for what the server honored only.
    const listens = backend.count("subscriptions/listen");
    await breakListenStream({ backend, clock });
    await backend.whenReceived("subscriptions/listen", listens + 1);
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://one"]);
  });

  it("subscribes a new URI when another subscribed URI became unknown: that one waits as pending", async () => {
    const { backend, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    backend.unknownUris.add("test://one");
    const refusal = nextEvent(c, "error");
    await c.subscribeToResource("test://two");
    expect(await refusal).toMatchObject({ operation: "resubscribe test://one", error: { data: { uri: "test://one" } } });
    expect(c.getSubscribedResources()).toEqual(["test://one", "test://two"]);
    expect(c.getPendingResourceSubscriptions()).toEqual(["test://one"]);
    expect(backend.listenFilters.slice(-2).map((f) => f.resourceSubscriptions)).toEqual([["test://one", "test://two"], ["test://two"]]);
    // The new URI's own rejection is still the caller's.
    backend.unknownUris.add("test://ghost");
    await expect(c.subscribeToResource("test://ghost")).rejects.toMatchObject({ data: { uri: "test://ghost" } });
    expect(c.getSubscribedResources()).toEqual(["test://one", "test://two"]);
  });

  it("leaves a URI whose removal failed out of later streams", async () => {
    const { backend, clock, client: c } = unitSetup("modern");
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    await c.subscribeToResource("test://two");
    backend.failing.add("subscriptions/listen");
    await expect(c.unsubscribeFromResource("test://one")).rejects.toBeInstanceOf(ProtocolError);
    expect(c.getSubscribedResources()).toEqual(["test://two"]);
    backend.failing.delete("subscriptions/listen");

    const listens = backend.count("subscriptions/listen");
    await breakListenStream({ backend, clock });
    await backend.whenReceived("subscriptions/listen", listens + 1);
    expect(backend.listenFilters.at(-1)?.resourceSubscriptions).toEqual(["test://two"]);
  });
});

describe("ResourceSubscriptions", () => {
  const channel = (add: SubscriptionChannel["add"] = async () => undefined): SubscriptionChannel => ({
    add,
    remove: async () => undefined,
    restore: async () => new Map<string, unknown>(),
    close: async () => undefined,
  });

  it("covers subscribed URIs and their sub-resources only", async () => {
    const set = new ResourceSubscriptions(() => undefined);
    await set.add("file:///project", () => channel());
    expect(set.covers("file:///project")).toBe(true);
    expect(set.covers("file:///project/src/a.ts")).toBe(true);
    expect(set.covers("file:///projects")).toBe(false);
    expect(set.covers("file:///other")).toBe(false);
  });

  it("covers a URI while it is being subscribed, and stops when the server refuses", async () => {
    const set = new ResourceSubscriptions(() => undefined);
    let refuse = (): void => undefined;
    const adding = set.add("demo://a", () => channel(() => new Promise<void>((_, reject) => (refuse = () => reject(new Error("refused"))))));
    await settle(1);
    expect(set.covers("demo://a")).toBe(true);
    expect(set.has("demo://a")).toBe(false);
    expect(set.list()).toEqual([]);
    refuse();
    await expect(adding).rejects.toThrow("refused");
    expect(set.covers("demo://a")).toBe(false);
  });
});
