import { Agent, request } from "node:http";
import type { Client } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, startModernHttpBackend, type HttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { NotificationRecorder } from "../fixtures/notification-recorder.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, post, startBroker, type Era, type RunningBroker } from "../helpers/harness.js";

const MESSAGE = "notifications/message";
const PROGRESS = "notifications/progress";

/** Calls routed to their backend: progress and logs reach the caller only; failures have their codes. */
describe("routing", () => {
  let legacyServer: TestServer;
  let legacyBackend: LegacyHttpBackend;
  let modernBackend: HttpBackend;
  let running: RunningBroker;
  let clients: Client[] = [];

  beforeAll(async () => {
    legacyServer = createTestServer({ name: "legacy-routing" });
    legacyBackend = await startLegacyHttpBackend(legacyServer);
    modernBackend = await startModernHttpBackend(createTestServer({ name: "modern-routing" }));
    running = await startBroker({
      backends: [
        { id: "leg", url: legacyBackend.url, era: "legacy", timeoutMs: 1_000, headers: { Authorization: "Bearer backend-secret" } },
        { id: "mod", url: modernBackend.url, era: "modern", timeoutMs: 1_000 },
        // Nothing listens there: the broker starts anyway and keeps retrying.
        { id: "down", url: "http://127.0.0.1:9/mcp", era: "legacy", reconnect: { initialDelayMs: 60_000, maxDelayMs: 60_000 } },
      ],
    }, {}, { readyBackends: ["leg", "mod"] });
  }, 60_000);

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    clients = [];
  });

  afterAll(async () => {
    await running?.close();
    await Promise.all([legacyBackend?.close(), modernBackend?.close()]);
  });

  /** With `watchProgress`, the client's progress handler is replaced: `onprogress` no longer works for it. */
  async function client(era: Era, watchProgress = false): Promise<{ client: Client; notes: NotificationRecorder }> {
    const c = await connectClient(running.url, era);
    clients.push(c);
    return { client: c, notes: new NotificationRecorder(c, watchProgress ? [MESSAGE, PROGRESS] : [MESSAGE]) };
  }

  it.each([
    ["legacy", "leg__slow"],
    ["modern", "mod__slow"],
  ] as const)("sends a %s caller its own progress and log messages, as the backend said them, and nobody else", async (era, tool) => {
    const caller = await client(era);
    const bystander = await client(era, true);
    if (era === "legacy") {
      await caller.client.setLoggingLevel("info");
      await bystander.client.setLoggingLevel("info");
    }
    const progress: { progress: number; _meta?: Record<string, unknown> }[] = [];
    const result = await caller.client.callTool(
      { name: tool, arguments: { ms: 40 }, ...(era === "modern" && { _meta: { "io.modelcontextprotocol/logLevel": "info" } }) },
      { onprogress: (p) => progress.push(p) },
    );
    expect(result.content).toEqual([{ type: "text", text: "waited 40ms" }]);
    expect(progress.map((p) => p.progress)).toEqual([1, 2, 3, 4]);
    // The backend's own `_meta` on its progress notifications comes through.
    expect(progress.map((p) => p._meta?.["example.com/step"])).toEqual([1, 2, 3, 4]);
    const [log] = caller.notes.all(MESSAGE);
    expect(log?.params).toMatchObject({ level: "info", logger: `${tool.split("__")[0]}/test-server`, data: "slow: waiting 40ms" });
    expect(bystander.notes.received).toEqual([]);
  });

  it("answers a client that takes only JSON with JSON, without the call's progress (it said it cannot read an event stream)", async () => {
    const init = await post(running.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const session = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "", "mcp-protocol-version": "2025-11-25" };
    await post(running.url, { jsonrpc: "2.0", method: "notifications/initialized" }, session);
    const call = { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "leg__slow", arguments: { ms: 40 }, _meta: { progressToken: "p" } } };
    const jsonOnly = await post(running.url, call, { ...session, accept: "application/json" });
    expect(jsonOnly.headers.get("content-type")).toContain("application/json");
    expect(jsonOnly.json).toMatchObject({ id: 2, result: { content: [{ type: "text", text: "waited 40ms" }] } });
    // With both listed, the same call streams its progress first.
    const both = await post(running.url, { ...call, id: 3 }, session);
    expect(both.headers.get("content-type")).toContain("text/event-stream");
    expect(both.text).toContain(PROGRESS);
  });

  it("lets a tool call in flight finish when the broker stops, and answers new requests 503 meanwhile", async () => {
    const stopping = await startBroker({ backends: [{ id: "leg", url: legacyBackend.url, era: "legacy", timeoutMs: 5_000, headers: { Authorization: "Bearer backend-secret" } }] }, {}, { readyBackends: ["leg"] });
    const init = await post(stopping.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const session = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "", "mcp-protocol-version": "2025-11-25" };
    await post(stopping.url, { jsonrpc: "2.0", method: "notifications/initialized" }, session);
    const slow = (id: number, ms: number) => ({ jsonrpc: "2.0", id, method: "tools/call", params: { name: "leg__slow", arguments: { ms } } });
    // A short call on a connection of its own (kept alive for the request after it), a long one on another.
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const started = legacyServer.stats.toolCalls.get("slow") ?? 0;
    const short = postOn(agent, stopping.url, slow(2, 300), session);
    const long = post(stopping.url, slow(3, 1_000), session);
    await eventually(() => (legacyServer.stats.toolCalls.get("slow") ?? 0) === started + 2, "both calls at the backend");
    const closed = stopping.close();
    // Before: their connections were closed under them (a socket hang-up, no answer).
    expect((await short).json).toMatchObject({ id: 2, result: { content: [{ type: "text", text: "waited 300ms" }] } });
    // The short call's connection, idle now: what it carries next is refused, and the connection closed.
    const refused = await postOn(agent, stopping.url, { jsonrpc: "2.0", id: 4, method: "ping" }, session);
    expect(refused).toMatchObject({ status: 503, connection: "close", json: { error: { code: -32005 } } });
    expect((await long).json).toMatchObject({ id: 3, result: { content: [{ type: "text", text: "waited 1000ms" }] } });
    await closed;
    agent.destroy();
  });

  it.each(["legacy", "modern"] as const)("answers a %s client as itself: a modern backend's serverInfo is not passed on", async (era) => {
    const { client: c } = await client(era);
    const result = await c.callTool({ name: "mod__echo", arguments: { text: "who" } });
    expect(result.content).toEqual([{ type: "text", text: "who" }]);
    const info = result._meta?.["io.modelcontextprotocol/serverInfo"];
    if (era === "modern") expect(info).toMatchObject({ name: "mcp-broker" });
    else expect(info).toBeUndefined();
  });

  it("gives a backend its configured credentials, never the client's", async () => {
    for (const era of ["legacy", "modern"] as const) {
      const c = await connectClient(running.url, era, { headers: { Authorization: "Bearer client-token" } });
      clients.push(c);
      expect((await c.callTool({ name: "leg__echo", arguments: { text: "hi" } })).content).toEqual([{ type: "text", text: "hi" }]);
    }
    expect(legacyBackend.authorizations()).toEqual(["Bearer backend-secret"]);
  });

  it("answers a backend timeout with -32001 and the backend and timeout in data", async () => {
    const { client: c } = await client("legacy");
    await expect(c.callTool({ name: "leg__slow", arguments: { ms: 3_000 } })).rejects.toMatchObject({
      code: -32001,
      data: { backend: "leg", timeoutMs: 1_000 },
    });
    // The backend is still usable afterwards.
    expect((await c.callTool({ name: "leg__echo", arguments: { text: "still here" } })).content).toEqual([{ type: "text", text: "still here" }]);
  });

  it("passes a backend's own errors through and rejects bad params with -32602", async () => {
    const { client: c } = await client("legacy");
    const failed = await c.callTool({ name: "leg__fail", arguments: {} });
    expect(failed.isError).toBe(true);
    await expect(c.callTool({ name: "leg__add", arguments: { a: "one", b: 2 } })).resolves.toMatchObject({ isError: true });
    const headers = await legacySession(running.url);
    const noName = await post(running.url, { jsonrpc: "2.0", id: 9, method: "tools/call", params: { arguments: {} } }, headers);
    expect(noName.json).toMatchObject({ id: 9, error: { code: -32602 } });
    const badCursor = await post(running.url, { jsonrpc: "2.0", id: 10, method: "tools/list", params: { cursor: "not-ours" } }, headers);
    expect(badCursor.json).toMatchObject({ id: 10, error: { code: -32602 } });
  });

  it("serves the other backends while one is down, and says which one is down in /readyz", async () => {
    const { client: c } = await client("legacy");
    const names = (await c.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(["leg__echo", "mod__echo"]));
    expect(names.some((n) => n.startsWith("down__"))).toBe(false);
    const readyz = await fetch(new URL("/readyz", running.url));
    expect(readyz.status).toBe(503);
    expect(await readyz.json()).toMatchObject({ status: "degraded", backends: expect.arrayContaining([expect.objectContaining({ id: "down", state: "backoff" })]) });
  });

  it("says a down backend is unavailable, not that its items are unknown", async () => {
    const { client: c } = await client("legacy");
    const unavailable = { code: -32000, data: { backend: "down" } };
    await expect(c.callTool({ name: "down__anything", arguments: {} })).rejects.toMatchObject(unavailable);
    await expect(c.getPrompt({ name: "down__anything" })).rejects.toMatchObject(unavailable);
    await expect(c.subscribeResource({ uri: "down+file:///x" })).rejects.toMatchObject(unavailable);
    await expect(c.readResource({ uri: "down+file:///x" })).rejects.toMatchObject(unavailable);
    await expect(c.complete({ ref: { type: "ref/prompt", name: "down__anything" }, argument: { name: "a", value: "" } })).rejects.toMatchObject(unavailable);
    await expect(c.complete({ ref: { type: "ref/resource", uri: "down+file:///{x}" }, argument: { name: "x", value: "" } })).rejects.toMatchObject(unavailable);
    // A backend that is up and lacks the item: unknown, as before.
    await expect(c.callTool({ name: "leg__nope", arguments: {} })).rejects.toMatchObject({ code: -32602 });
  });

  it("answers a resource its backend does not have with the client era's not-found code and our URI", async () => {
    const headers = await legacySession(running.url);
    const legacy = await post(running.url, { jsonrpc: "2.0", id: 3, method: "resources/read", params: { uri: "leg+test://nope" } }, headers);
    expect(legacy.json).toMatchObject({ id: 3, error: { code: -32002, data: { uri: "leg+test://nope" } } });
    const { client: modern } = await client("modern");
    await expect(modern.readResource({ uri: "mod+test://nope" })).rejects.toMatchObject({ code: -32602, data: { uri: "mod+test://nope" } });
  });

  it("refuses a URI over 16,384 bytes or 128 '/' at every entry with -32602 saying it is too long, and serves one at the limits", async () => {
    const headers = await legacySession(running.url);
    const send = async (id: number, method: string, params: Record<string, unknown>) => (await post(running.url, { jsonrpc: "2.0", id, method, params }, headers)).json;
    const tooLong = (id: number, limit: string) => ({ id, error: { code: -32602, message: expect.stringMatching(new RegExp(`^URI too long: .*the limit is ${limit}`)) as unknown } });
    // Below a listed resource, and 2 MB long: the sub-resource walk would take about a second.
    const slashed = `leg+test://static/a/${"a/".repeat(1_000_000)}`;
    expect(await send(1, "resources/read", { uri: slashed })).toMatchObject(tooLong(1, "16384 bytes"));
    // One byte over the limit, and matching a template (whose matcher stops at the same limit).
    const prefix = "leg+test://items/";
    const atLimit = `${prefix}${"x".repeat(16_384 - prefix.length)}`;
    for (const [id, method, params] of [
      [2, "resources/read", { uri: `${atLimit}x` }],
      [3, "resources/subscribe", { uri: `${atLimit}x` }],
      [4, "resources/unsubscribe", { uri: `${atLimit}x` }],
      [5, "completion/complete", { ref: { type: "ref/resource", uri: `${atLimit}x` }, argument: { name: "id", value: "" } }],
      [6, "resources/read", { uri: `${prefix}${"é".repeat(8_184)}` }], // 16,385 bytes in 8,201 characters
      [7, "resources/read", { uri: `leg+test://static/a/${"a/".repeat(125)}` }], // 129 '/'
    ] as const) {
      expect(await send(id, method, params), `${id}`).toMatchObject(tooLong(id, id === 7 ? "128" : "16384 bytes"));
    }
    const { client: modern } = await client("modern");
    await expect(modern.listen({ resourceSubscriptions: ["leg+test://static/a", `${atLimit}x`] })).rejects.toMatchObject({ code: -32602, message: expect.stringContaining("URI too long") });
    // At the limits: served.
    const read = (await send(8, "resources/read", { uri: atLimit })) as { result: { contents: { uri: string }[] } };
    expect(read.result.contents[0]?.uri).toBe(atLimit);
    // 128 '/': looked up, and forwarded below test://static/a, which the backend does not have.
    const deepest = `leg+test://static/a/${"a/".repeat(124)}`;
    expect(await send(9, "resources/read", { uri: deepest })).toMatchObject({ id: 9, error: { code: -32002, data: { uri: deepest } } });
  });

  it("lets the first unprefixed backend win a name collision and reports it in /readyz", async () => {
    const secondServer = createTestServer({ name: "second" });
    const second = await startLegacyHttpBackend(secondServer);
    const broker = await startBroker({
      backends: [
        { id: "first", url: legacyBackend.url, era: "legacy", prefix: false },
        { id: "second", url: second.url, era: "legacy", prefix: false },
      ],
    });
    try {
      const c = await connectClient(broker.url, "legacy");
      clients.push(c);
      const echoes = (await c.listTools()).tools.filter((t) => t.name === "echo");
      expect(echoes).toHaveLength(1);
      expect((await c.callTool({ name: "echo", arguments: { text: "who" } })).content).toEqual([{ type: "text", text: "who" }]);
      const before = legacyServer.stats.toolCalls.get("echo") ?? 0;
      await c.callTool({ name: "echo", arguments: { text: "again" } });
      expect(legacyServer.stats.toolCalls.get("echo")).toBe(before + 1);
      expect(secondServer.stats.toolCalls.get("echo")).toBeUndefined();
      const readyz = (await (await fetch(new URL("/readyz", broker.url))).json()) as { collisions?: string[] };
      expect(readyz.collisions).toContain("tools 'echo' of backend 'second' is hidden by backend 'first'");
    } finally {
      await broker.close();
      await second.close();
    }
  });
});

async function legacySession(url: string): Promise<Record<string, string>> {
  const init = await post(url, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
  return { "mcp-session-id": init.headers.get("mcp-session-id") ?? "" };
}

/** A JSON-RPC POST over `agent` (its connections, kept alive), with its status, JSON body and Connection header. */
function postOn(agent: Agent, url: string, body: unknown, headers: Record<string, string>): Promise<{ status: number; json: unknown; connection: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", agent, headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => (text += chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as unknown, connection: res.headers.connection }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}
