import type { Client } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type HttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, startBroker, startEngineBrokers, type Era, type RunningBroker } from "../helpers/harness.js";

const META_TOOLS = ["catalog_resources", "describe_resource", "search_resources", "catalog_resource_templates"];

/** A tool call's structured result (the SDK client checks it against the tool's outputSchema). */
async function structured(client: Client, name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const result = await client.callTool({ name, arguments: args });
  expect(result.isError ?? false).toBe(false);
  return result.structuredContent as Record<string, unknown>;
}

/**
 * The broker's own discovery tools through the broker, in both eras and on both engines: listed
 * beside the backends' tools, answered by the broker, with the cluster-wide subscriber count (on the
 * Redis engine, a subscription made on another broker instance counts). An unprefixed backend's
 * tool of the same name is hidden, and reported.
 */
describe.each(["memory", "redis"] as const)("meta tools on the %s engine", (engine) => {
  let pushing: HttpBackend;
  let polled: HttpBackend;
  let plain: HttpBackend;
  let brokers: RunningBroker[] = [];
  let closeBrokers: () => Promise<void> = async () => undefined;
  let clients: Client[] = [];

  beforeAll(async () => {
    pushing = await startLegacyHttpBackend(createTestServer({ name: "pushing" }));
    polled = await startLegacyHttpBackend(createTestServer({ name: "polled", subscribe: false }));
    const plainServer = createTestServer({ name: "plain" });
    plainServer.addTool("search_resources"); // the broker's name: hidden behind the broker's own
    plain = await startLegacyHttpBackend(plainServer);
    ({ brokers, close: closeBrokers } = await startEngineBrokers(engine, {
      backends: [
        { id: "push", url: pushing.url, era: "legacy" },
        { id: "poll", url: polled.url, era: "legacy" },
        { id: "plain", url: plain.url, era: "legacy", prefix: false },
      ],
    }));
  }, 60_000);

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    clients = [];
  });

  afterAll(async () => {
    await closeBrokers();
    await Promise.all([pushing?.close(), polled?.close(), plain?.close()]);
  });

  async function client(era: Era, broker = 0): Promise<Client> {
    const c = await connectClient(brokers[broker]?.url ?? "", era);
    clients.push(c);
    return c;
  }

  it.each(["legacy", "modern"] as const)("lists the four tools for a %s client, with output schemas, beside the backends' tools", async (era) => {
    const c = await client(era);
    const { tools } = await c.listTools();
    const names = tools.map((t) => t.name);
    for (const name of META_TOOLS) expect(names.filter((n) => n === name)).toEqual([name]);
    expect(names).toContain("push__echo");
    for (const tool of tools.filter((t) => META_TOOLS.includes(t.name))) expect(tool.outputSchema).toMatchObject({ type: "object" });
  });

  it.each(["legacy", "modern"] as const)("answers a %s client's catalog, search and template calls from the aggregated lists", async (era) => {
    const c = await client(era);
    await c.listTools(); // the SDK client validates structured results against the listed output schemas
    const all = (await structured(c, "catalog_resources", {})).resources as { uri: string; serverId: string }[];
    expect(all).toContainEqual({ uri: "push+test://static/a", name: "static-a", mimeType: "text/plain", serverId: "push" });
    expect(all).toContainEqual({ uri: "test://static/a", name: "static-a", mimeType: "text/plain", serverId: "plain" });
    const fromPoll = (await structured(c, "catalog_resources", { serverId: "poll" })).resources as { uri: string }[];
    expect(fromPoll.map((r) => r.uri)).toEqual(["poll+test://static/a", "poll+test://static/b", "poll+test://odd/a%20b?x=1#frag"]);
    const found = (await structured(c, "search_resources", { query: "statc", limit: 20 })).resources as { uri: string }[];
    expect(found.map((r) => r.uri)).toEqual(expect.arrayContaining(["push+test://static/a", "poll+test://static/b", "test://static/a"]));
    expect(found.map((r) => r.uri)).not.toContain("push+test://odd/a%20b?x=1#frag");
    const templates = (await structured(c, "catalog_resource_templates", { serverId: "push" })).templates;
    expect(templates).toEqual([{ uriTemplate: "push+test://items/{id}", name: "item", serverId: "push" }]);
  });

  it("describes a resource with its subscribers across the cluster and how its updates arrive", async () => {
    const subscriber = await client("legacy", brokers.length - 1);
    const listener = await client("modern", brokers.length - 1);
    await subscriber.subscribeResource({ uri: "push+test://static/a" });
    const listen = await listener.listen({ resourceSubscriptions: ["push+test://static/a", "poll+test://static/b"] });
    const asker = await client("modern", 0); // on the Redis engine, another broker instance
    await asker.listTools();
    expect(await structured(asker, "describe_resource", { uri: "push+test://static/a" })).toEqual({
      uri: "push+test://static/a",
      name: "static-a",
      mimeType: "text/plain",
      serverId: "push",
      match: "listed",
      subscribers: 2,
      updates: "push",
    });
    expect(await structured(asker, "describe_resource", { uri: "poll+test://static/b" })).toMatchObject({ subscribers: 1, updates: "poll" });
    expect(await structured(asker, "describe_resource", { uri: "push+test://items/7" })).toMatchObject({ match: "template", uriTemplate: "push+test://items/{id}", subscribers: 0 });
    await listen.close();
    await subscriber.unsubscribeResource({ uri: "push+test://static/a" });
    expect(await structured(asker, "describe_resource", { uri: "push+test://static/a" })).toMatchObject({ subscribers: 0 });
  });

  it("answers an unknown URI or bad arguments with a tool error, not a protocol error", async () => {
    const c = await client("legacy");
    expect(await c.callTool({ name: "describe_resource", arguments: { uri: "nowhere://x" } })).toMatchObject({ isError: true, content: [{ type: "text", text: expect.stringContaining("Unknown resource") }] });
    expect(await c.callTool({ name: "search_resources", arguments: {} })).toMatchObject({ isError: true, content: [{ type: "text", text: expect.stringContaining("query") }] });
  });

  it("hides an unprefixed backend's tool of the same name behind the broker's own, and reports it", async () => {
    const c = await client("legacy");
    const result = await c.callTool({ name: "search_resources", arguments: { query: "static" } });
    expect(result.structuredContent).toMatchObject({ resources: expect.any(Array) }); // the broker's, not the backend's dynamic tool
    const readyz = (await (await fetch(new URL("/readyz", brokers[0]?.url))).json()) as { collisions?: string[] };
    expect(readyz.collisions).toContain("tools 'search_resources' of backend 'plain' is hidden by the broker's own tool of that name (metaTools)");
  });
});

describe("metaTools: false", () => {
  it("lists no meta tools, and an unprefixed backend's tool of that name is its own again", async () => {
    const server = createTestServer({ name: "plain" });
    server.addTool("search_resources");
    const backend = await startLegacyHttpBackend(server);
    const running = await startBroker({ backends: [{ id: "plain", url: backend.url, era: "legacy", prefix: false }], metaTools: false });
    try {
      const c = await connectClient(running.url, "legacy");
      const names = (await c.listTools()).tools.map((t) => t.name);
      expect(names.filter((n) => META_TOOLS.includes(n))).toEqual(["search_resources"]);
      expect((await c.callTool({ name: "search_resources", arguments: {} })).content).toEqual([{ type: "text", text: "called search_resources" }]);
      await c.close();
    } finally {
      await running.close();
      await backend.close();
    }
  });
});
