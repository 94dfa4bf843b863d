import { ProtocolError } from "@modelcontextprotocol/client";
import { afterEach, describe, expect, it } from "vitest";
import type { BrokerClient } from "../../src/index.js";
import { ResourceSubscriptions } from "../../src/subscriptions/resource-subscriptions.js";
import { eventually, firstText, nextEvent, record } from "../helpers/events.js";
import { unitSetup } from "../helpers/unit-client.js";
import type { TestBackend } from "../helpers/test-backend.js";

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

  it("reports an update of an uncached resource as resourceUpdated", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.subscribeToResource("test://one");
    const updated = nextEvent(c, "resourceUpdated");
    backend.updated("test://one");
    expect(await updated).toEqual({ uri: "test://one" });
  });

  it("re-reads cached content on an update and announces the new content", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.subscribeToResource("test://one");
    const updates = record(c, "resourceUpdated");
    backend.texts.set("test://one", "one v2");
    const change = nextEvent(c, "resourceContentChange");
    backend.updated("test://one");
    const { entry } = await change;
    expect(firstText(entry?.content)).toBe("one v2");
    expect(firstText(c.cache.getResource("test://one")?.content)).toBe("one v2");
    expect(updates).toEqual([]);
  });

  it("re-reads a template entry whose expanded URI was updated", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResourceFromTemplate("test://items/{id}", { id: "5" });
    await c.subscribeToResource("test://items/5");
    backend.templateText = () => "item 5, changed";
    const change = nextEvent(c, "resourceContentChange");
    backend.updated("test://items/5");
    expect(await change).toMatchObject({ source: "template", uriTemplate: "test://items/{id}", uri: "test://items/5" });
    expect(firstText(c.cache.getResourceTemplate("test://items/{id}")?.content)).toBe("item 5, changed");
    expect(c.cache.getResourceTemplate("test://items/{id}")?.params).toEqual({ id: "5" });
  });

  it("drops cached content whose re-read fails, and says why", async () => {
    const { backend, client: c } = unitSetup(era);
    client = c;
    await c.connect();
    await c.readResource("test://one");
    await c.subscribeToResource("test://one");
    backend.texts.delete("test://one");
    const change = nextEvent(c, "resourceContentChange");
    backend.updated("test://one");
    const detail = await change;
    expect(detail.entry).toBeNull();
    expect(detail.error).toBeInstanceOf(ProtocolError);
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
    backend.updated("test://one");
    backend.updated("test://two");
    await eventually(() => updates.length > 0, "the update of test://two");
    expect(updates).toEqual([{ uri: "test://two" }]);
  });
});

describe("legacy resource subscriptions", () => {
  it("rejects a subscription the server refuses and leaves the set as it was", async () => {
    const { backend, client } = unitSetup("legacy");
    await client.connect();
    backend.unknownUris.add("test://ghost");
    await expect(client.subscribeToResource("test://ghost")).rejects.toBeInstanceOf(ProtocolError);
    expect(client.getSubscribedResources()).toEqual([]);
    await client.disconnect();
  });
});

describe("ResourceSubscriptions.covers", () => {
  it("covers subscribed URIs and their sub-resources only", async () => {
    const set = new ResourceSubscriptions(() => undefined);
    const channel = { add: async () => undefined, remove: async () => undefined, restore: async () => new Map<string, unknown>(), close: async () => undefined };
    await set.add("file:///project", () => channel);
    expect(set.covers("file:///project")).toBe(true);
    expect(set.covers("file:///project/src/a.ts")).toBe(true);
    expect(set.covers("file:///projects")).toBe(false);
    expect(set.covers("file:///other")).toBe(false);
  });
});
