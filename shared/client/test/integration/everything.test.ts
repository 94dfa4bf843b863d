import { createRequire } from "node:module";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { afterEach, describe, expect, it } from "vitest";
import { BrokerClient } from "../../src/index.js";
import { firstText, nextEvent, noPendingSubscriptions } from "../helpers/events.js";

/** The published reference server, spawned over stdio (it serves the legacy era only). */
const EVERYTHING = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js");
const ARCHITECTURE = "demo://resource/static/document/architecture.md";

/** A transport factory that spawns a fresh server-everything per connection and remembers each. */
function everythingTransport(): { factory: () => StdioClientTransport; spawned: StdioClientTransport[] } {
  const spawned: StdioClientTransport[] = [];
  const factory = (): StdioClientTransport => {
    const transport = new StdioClientTransport({ command: process.execPath, args: [EVERYTHING, "stdio"], stderr: "ignore" });
    spawned.push(transport);
    return transport;
  };
  return { factory, spawned };
}

describe("BrokerClient directly against server-everything (stdio transport)", () => {
  let client: BrokerClient | undefined;
  afterEach(async () => {
    await client?.disconnect();
    client = undefined;
  });

  it("negotiates the legacy era on its own and loads the lists", async () => {
    const { factory } = everythingTransport();
    client = new BrokerClient({ transport: factory });
    await client.connect();
    expect(client.era).toBe("legacy");
    expect(client.getTools().map((t) => t.name)).toEqual(expect.arrayContaining(["echo", "toggle-subscriber-updates", "gzip-file-as-resource"]));
    expect(client.getResources().map((r) => r.uri)).toContain(ARCHITECTURE);
    expect(client.getResourceTemplates().map((t) => t.uriTemplate)).toContain("demo://resource/dynamic/text/{resourceId}");
    expect(client.getPrompts().map((p) => p.name)).toContain("args-prompt");
  });

  it("subscribes, and re-reads cached content when the server sends updates", async () => {
    const { factory } = everythingTransport();
    client = new BrokerClient({ transport: factory, era: "legacy" });
    await client.connect();
    await client.subscribeToResource(ARCHITECTURE);
    const cached = await client.readResource(ARCHITECTURE);
    // toggle-subscriber-updates sends resources/updated for every subscribed URI at once, then every 5 s.
    const change = nextEvent(client, "resourceContentChange", (d) => d.uri === ARCHITECTURE);
    await client.callTool("toggle-subscriber-updates");
    const { entry } = await change;
    expect(entry?.content).toEqual(cached);
    expect(client.cache.getResource(ARCHITECTURE)).toBe(entry);
  });

  it("reads through a template, gets prompts and caches tool calls, failures included", async () => {
    const { factory } = everythingTransport();
    client = new BrokerClient({ transport: factory, era: "legacy" });
    await client.connect();
    const read = await client.readResourceFromTemplate("demo://resource/dynamic/text/{resourceId}", { resourceId: "3" });
    expect(firstText(read)).toMatch(/^Resource 3: /);
    expect(client.cache.getResourceTemplate("demo://resource/dynamic/text/{resourceId}")?.uri).toBe("demo://resource/dynamic/text/3");

    await client.getPrompt("args-prompt", { city: "Paris" });
    expect(JSON.stringify(client.cache.getPrompt("args-prompt")?.result.messages)).toContain("Paris");

    const echo = await client.callTool("echo", { message: "hi" });
    expect(echo.content).toEqual([{ type: "text", text: "Echo: hi" }]);
    await client.callTool("no-such-tool").then(
      (result) => expect(result.isError).toBe(true),
      () => undefined,
    );
    expect(client.cache.getToolCallResult("no-such-tool")).toMatchObject({ success: false });
    expect(client.cache.getToolCallResult("echo")).toMatchObject({ success: true, result: echo });
  });

  it("reloads the resource list when a tool adds a resource", async () => {
    const { factory } = everythingTransport();
    client = new BrokerClient({ transport: factory, era: "legacy", listChangedDebounceMs: 20 });
    await client.connect();
    const added = nextEvent(client, "resourcesChange", (d) => d.resources.some((r) => r.uri === "demo://resource/session/hello.gz"));
    await client.callTool("gzip-file-as-resource", { name: "hello.gz", data: "data:text/plain;base64,SGVsbG8=", outputType: "resourceLink" });
    await added;
  });

  it("respawns the server through the transport factory when it dies, and re-subscribes", async () => {
    const { factory, spawned } = everythingTransport();
    client = new BrokerClient({ transport: factory, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 } });
    await client.connect();
    await client.subscribeToResource(ARCHITECTURE);
    const pid = spawned[0]?.pid;
    expect(pid).toEqual(expect.any(Number));
    const reconnected = nextEvent(client, "connectionChange", (d) => d.state === "connected");
    process.kill(pid ?? 0);
    await reconnected;
    expect(spawned).toHaveLength(2);
    await noPendingSubscriptions(client);
    const updated = nextEvent(client, "resourceUpdated", (d) => d.uri === ARCHITECTURE);
    await client.callTool("toggle-subscriber-updates");
    await updated;
  });
});
