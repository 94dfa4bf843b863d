import type { Client } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectUpdates, connectClient, eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";

/** The broker in front of the published reference server, driven by SDK v2 clients in both eras. */
describe("broker in front of server-everything", () => {
  let running: RunningBroker;
  const clients: Client[] = [];

  beforeAll(async () => {
    running = await startBroker({
      backends: [{ id: "everything", command: "npx", args: ["-y", "@modelcontextprotocol/server-everything"], era: "legacy" }],
      lists: { pageSize: 5 },
      metaTools: false, // the lists and pages are server-everything's alone
    });
  }, 120_000);

  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    await running?.close();
  });

  async function client(era: "legacy" | "modern"): Promise<Client> {
    const c = await connectClient(running.url, era);
    clients.push(c);
    return c;
  }

  it.each(["legacy", "modern"] as const)("aggregates and routes in the %s era", async (era) => {
    const c = await client(era);
    const { tools } = await c.listTools();
    expect(tools.map((t) => t.name)).toContain("everything__echo");
    expect(tools.every((t) => t.name.startsWith("everything__"))).toBe(true);
    const echo = await c.callTool({ name: "everything__echo", arguments: { message: "hi" } });
    expect(echo.content).toEqual([{ type: "text", text: "Echo: hi" }]);

    const { resourceTemplates } = await c.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate)).toContain("everything+demo://resource/dynamic/text/{resourceId}");
    const read = await c.readResource({ uri: "everything+demo://resource/dynamic/text/7" });
    expect(read.contents[0]?.uri).toBe("everything+demo://resource/dynamic/text/7");

    const prompt = await c.getPrompt({ name: "everything__args-prompt", arguments: { city: "Paris" } });
    expect(JSON.stringify(prompt.messages)).toContain("Paris");
    const completion = await c.complete({ ref: { type: "ref/prompt", name: "everything__completable-prompt" }, argument: { name: "department", value: "E" } });
    expect(completion.completion.values).toContain("Engineering");
  });

  it("paginates the aggregated lists with opaque cursors", async () => {
    const first = await post(running.url, { jsonrpc: "2.0", id: 1, method: "tools/list", params: {} }, await sessionHeaders(running.url));
    const page = (first.json as { result: { tools: unknown[]; nextCursor?: string } }).result;
    expect(page.tools).toHaveLength(5);
    expect(typeof page.nextCursor).toBe("string");
    const c = await client("legacy");
    const all = await c.listTools();
    expect(all.tools.length).toBeGreaterThan(5);
    const bad = await post(running.url, { jsonrpc: "2.0", id: 2, method: "tools/list", params: { cursor: "garbage" } }, await sessionHeaders(running.url));
    expect((bad.json as { error: { code: number } }).error.code).toBe(-32602);
  });

  it("answers unknown names and URIs with the era's error codes", async () => {
    const headers = await sessionHeaders(running.url);
    const legacyRead = await post(running.url, { jsonrpc: "2.0", id: 1, method: "resources/read", params: { uri: "nope://x" } }, headers);
    expect(legacyRead.json).toMatchObject({ error: { code: -32002, data: { uri: "nope://x" } } });
    const legacySub = await post(running.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "everything+nope://x" } }, headers);
    expect(legacySub.json).toMatchObject({ error: { code: -32002, data: { uri: "everything+nope://x" } } });
    const tool = await post(running.url, { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "nope" } }, headers);
    expect(tool.json).toMatchObject({ error: { code: -32602 } });
    const method = await post(running.url, { jsonrpc: "2.0", id: 4, method: "nope/nope" }, headers);
    expect(method.json).toMatchObject({ error: { code: -32601 } });
    const modern = await post(running.url, modernRequest(5, "resources/read", { uri: "nope://x" }), { "mcp-protocol-version": "2026-07-28", "mcp-method": "resources/read", "mcp-name": "nope://x" });
    expect(modern.json).toMatchObject({ error: { code: -32602, data: { uri: "nope://x" } } });
  });

  it("answers a resource server-everything (SDK v1) does not have with the era's not-found code and our URI", async () => {
    // SDK v1's McpServer says -32602 "Resource <uri> not found", without data; the broker names it
    // as for any missing resource. Both forms of the URI v1 may echo (as sent, and as a WHATWG URL).
    for (const uri of ["everything+demo://resource/zzz/1", "everything+demo://resource/static/document/architecture.md/x y"]) {
      const legacy = await post(running.url, { jsonrpc: "2.0", id: 1, method: "resources/read", params: { uri } }, await sessionHeaders(running.url));
      expect(legacy.json, uri).toEqual({ jsonrpc: "2.0", id: 1, error: { code: -32002, message: expect.stringContaining(`'${uri}'`), data: { uri } } });
      const modern = await client("modern");
      const failure = await modern.readResource({ uri }).then(() => undefined, (error: unknown) => error as { code: number; message: string; data: unknown });
      expect({ code: failure?.code, data: failure?.data }, uri).toEqual({ code: -32602, data: { uri } });
      expect(failure?.message, uri).toContain(`'${uri}'`);
    }
  });

  it("delivers the backend's updates to every subscriber in both eras and to no one else", async () => {
    const uri = "everything+demo://resource/static/document/architecture.md";
    const legacyA = await client("legacy");
    const legacyB = await client("legacy");
    const modern = await client("modern");
    const bystander = await client("legacy");
    const [a, b, m, none] = [collectUpdates(legacyA), collectUpdates(legacyB), collectUpdates(modern), collectUpdates(bystander)];
    await legacyA.subscribeResource({ uri });
    await legacyB.subscribeResource({ uri });
    await legacyB.subscribeResource({ uri }); // idempotent
    const listen = await modern.listen({ resourceSubscriptions: [uri] });
    expect(listen.honoredFilter.resourceSubscriptions).toEqual([uri]);
    expect(running.broker.upstream.watched("everything")).toEqual(["demo://resource/static/document/architecture.md"]);
    await bystander.callTool({ name: "everything__toggle-subscriber-updates", arguments: {} });
    await eventually(() => a.length > 0 && b.length > 0 && m.length > 0, "an update at every subscriber", 20_000);
    expect(new Set([...a, ...b, ...m])).toEqual(new Set([uri]));
    expect(none).toEqual([]);
    await bystander.callTool({ name: "everything__toggle-subscriber-updates", arguments: {} });
    await listen.close();
  }, 40_000);
});

function modernRequest(id: number, method: string, params: Record<string, unknown>) {
  return {
    jsonrpc: "2.0",
    id,
    method,
    params: { ...params, _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } },
  };
}

/** A fresh legacy session (raw initialize), for raw wire assertions. */
async function sessionHeaders(url: string): Promise<Record<string, string>> {
  const init = await post(url, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
  const sessionId = init.headers.get("mcp-session-id");
  if (sessionId === null) throw new Error("no session id");
  return { "mcp-session-id": sessionId };
}
