import { ProtocolError, ResourceNotFoundError } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { BrokerClient } from "../../src/index.js";
import { startDemoBroker, tempFilesDir, type DemoBroker } from "../helpers/demo-broker.js";
import { eventually, firstText, nextEvent } from "../helpers/events.js";

/**
 * The client against the broker (in this process) in front of the demo backend, in both eras:
 * tools `demo__*`, resources `demo+demo://…`.
 */
describe.each(["legacy", "modern"] as const)("BrokerClient against the broker (%s)", (era) => {
  let running: DemoBroker;
  let files: Awaited<ReturnType<typeof tempFilesDir>>;
  let clients: BrokerClient[] = [];

  beforeAll(async () => {
    files = await tempFilesDir();
    running = await startDemoBroker(files.dir);
  });

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.disconnect()));
    clients = [];
  });

  afterAll(async () => {
    await running?.close();
    await files?.remove();
  });

  async function connect(): Promise<BrokerClient> {
    const client = new BrokerClient({ url: running.url, era, listChangedDebounceMs: 20 });
    clients.push(client);
    await client.connect();
    return client;
  }

  it("connects in the era and loads the namespaced lists", async () => {
    const client = await connect();
    expect(client.era).toBe(era);
    expect(client.serverInfo?.name).toBe("mcp-broker");
    expect(client.supportsResourceSubscriptions()).toBe(true);
    expect(client.getTools().map((t) => t.name)).toEqual(expect.arrayContaining(["demo__bump_counter", "demo__write_file", "demo__toggle_extra_tool"]));
    expect(client.getResources().map((r) => r.uri)).toEqual(expect.arrayContaining(["demo+demo://clock", "demo+demo://counter"]));
    expect(client.getResourceTemplates().map((t) => t.uriTemplate)).toContain("demo+demo://files/{name}");
    expect(client.getPrompts().map((p) => p.name)).toContain("demo__summarize");
  });

  it("subscribes with one call, re-reads cached content on updates, and unsubscribes upstream", async () => {
    const client = await connect();
    await client.subscribeToResource("demo+demo://counter");
    expect(running.broker.upstream.watched("demo")).toContain("demo://counter");

    const updated = nextEvent(client, "resourceUpdated", (d) => d.uri === "demo+demo://counter");
    await client.callTool("demo__bump_counter");
    await updated;

    const initial = Number(firstText(await client.readResource("demo+demo://counter")));
    const change = nextEvent(client, "resourceContentChange", (d) => firstText(d.entry?.content) === String(initial + 5));
    await client.callTool("demo__bump_counter", { by: 5 });
    expect((await change).source).toBe("resource");
    expect(firstText(client.cache.getResource("demo+demo://counter")?.content)).toBe(String(initial + 5));

    await client.unsubscribeFromResource("demo+demo://counter");
    expect(client.getSubscribedResources()).toEqual([]);
    await eventually(() => !running.broker.upstream.watched("demo").includes("demo://counter"), "the upstream release");
  });

  it("reloads the tool list on list_changed and drops the cached result of a tool that is gone", async () => {
    const client = await connect();
    const added = nextEvent(client, "toolsChange", (d) => d.tools.some((t) => t.name === "demo__extra"));
    await client.callTool("demo__toggle_extra_tool");
    await added;
    await client.callTool("demo__extra");
    expect(client.cache.getToolCallResult("demo__extra")).toMatchObject({ success: true });

    const removed = nextEvent(client, "toolsChange", (d) => !d.tools.some((t) => t.name === "demo__extra"));
    await client.callTool("demo__toggle_extra_tool");
    await removed;
    expect(client.cache.getToolCallResult("demo__extra")).toBeNull();
    expect(client.cache.getToolCallResult("demo__toggle_extra_tool")).toMatchObject({ success: true });
  });

  it("follows files through the template: list changes, template reads, updates and deletion", async () => {
    const client = await connect();
    const name = `${era}-note.txt`;
    const uri = `demo+demo://files/${name}`;
    const listed = nextEvent(client, "resourcesChange", (d) => d.resources.some((r) => r.uri === uri));
    await client.callTool("demo__write_file", { name, content: "first" });
    await listed;

    const read = await client.readResourceFromTemplate("demo+demo://files/{name}", { name });
    expect(firstText(read)).toBe("first");
    expect(client.cache.getResourceTemplate("demo+demo://files/{name}")).toMatchObject({ uri, params: { name } });

    await client.subscribeToResource(uri);
    const rewritten = nextEvent(client, "resourceContentChange", (d) => d.source === "template" && firstText(d.entry?.content) === "second");
    await client.callTool("demo__write_file", { name, content: "second" });
    expect(await rewritten).toMatchObject({ uri, uriTemplate: "demo+demo://files/{name}" });

    // Deleted: the update's re-read fails, so the entry goes, with the reason.
    const gone = nextEvent(client, "resourceContentChange", (d) => d.entry === null);
    const unlisted = nextEvent(client, "resourcesChange", (d) => !d.resources.some((r) => r.uri === uri));
    await client.callTool("demo__delete_file", { name });
    expect((await gone).error).toBeInstanceOf(ProtocolError);
    await unlisted;
    expect(client.cache.getResourceTemplate("demo+demo://files/{name}")).toBeNull();
  });

  it("rejects a subscription to an unknown URI and caches failed calls", async () => {
    const client = await connect();
    // The broker answers -32002 (legacy) or -32602 (modern), both with data.uri; the SDK turns either into this.
    const error = await client.subscribeToResource("demo+demo://nope").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResourceNotFoundError);
    expect((error as ResourceNotFoundError).uri).toBe("demo+demo://nope");
    expect(client.getSubscribedResources()).toEqual([]);

    const thrown = await client.callTool("demo__nope").catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(ProtocolError);
    expect(client.cache.getToolCallResult("demo__nope")).toMatchObject({ success: false, error: thrown });

    const prompt = await client.getPrompt("demo__summarize", { uri: "demo://counter" });
    expect(client.cache.getPrompt("demo__summarize")).toMatchObject({ params: { uri: "demo://counter" }, result: prompt });
  });

  it("ends its broker session on disconnect, releasing the subscriptions at once", async () => {
    const client = await connect();
    await client.subscribeToResource("demo+demo://clock");
    await eventually(() => running.broker.upstream.watched("demo").includes("demo://clock"), "the upstream subscription");
    await client.disconnect();
    expect(client.state).toBe("disconnected");
    if (era === "legacy") expect(running.broker.sessions.legacySessions().filter((s) => !s.closed)).toHaveLength(0);
    else await eventually(() => running.broker.sessions.listenCount() === 0, "the listen stream to close");
    await eventually(() => !running.broker.upstream.watched("demo").includes("demo://clock"), "the upstream release");
  });

  it("leaves no session behind when disconnect() comes while connect() runs", async () => {
    const client = new BrokerClient({ url: running.url, era, reconnect: { heartbeatIntervalMs: 0 } });
    const outcomes = new Set<string>();
    for (let i = 0; i < 24; i++) {
      const connecting = client.connect().then(
        () => "connected",
        (error: unknown) => (error as { code?: string }).code ?? "failed",
      );
      await new Promise((resolve) => setTimeout(resolve, i % 8));
      await client.disconnect();
      outcomes.add(await connecting);
    }
    expect(outcomes.has("CONNECT_ABORTED")).toBe(true);
    await eventually(() => running.broker.sessions.legacySessions().filter((s) => !s.closed).length === 0, "every session ended");
  });
});

describe("BrokerClient era negotiation against the broker", () => {
  it("negotiates the modern era with era: auto", async () => {
    const files = await tempFilesDir();
    const running = await startDemoBroker(files.dir);
    const client = new BrokerClient({ url: running.url });
    try {
      await client.connect();
      expect(client.era).toBe("modern");
    } finally {
      await client.disconnect();
      await running.close();
      await files.remove();
    }
  });
});
