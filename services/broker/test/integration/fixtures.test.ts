/**
 * Proves the test backends and the demo backend with the real SDK v2 client, over real
 * transports, in both eras. Every wait is an awaited event with a timeout; every process and
 * server a test starts is stopped in afterEach.
 */
import { spawn } from "node:child_process";
import { access, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Client, StreamableHTTPClientTransport, SUBSCRIPTION_ID_META_KEY, type Notification } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { afterEach, describe, expect, test } from "vitest";
import { startLegacyHttpBackend, startModernHttpBackend } from "../fixtures/http-backends.js";
import { NotificationRecorder, updatedUri } from "../fixtures/notification-recorder.js";
import { createTestServer } from "../fixtures/test-server.js";

const BROKER_DIR = fileURLToPath(new URL("../..", import.meta.url));
const STDIO_BACKEND = fileURLToPath(new URL("../fixtures/stdio-backend.ts", import.meta.url));
const DEMO_BACKEND = fileURLToPath(new URL("../../src/demo/demo-backend.ts", import.meta.url));

const UPDATED = "notifications/resources/updated";
const RESOURCES_CHANGED = "notifications/resources/list_changed";
const TOOLS_CHANGED = "notifications/tools/list_changed";
const PROMPTS_CHANGED = "notifications/prompts/list_changed";
const ALL_NOTIFICATIONS = [UPDATED, RESOURCES_CHANGED, TOOLS_CHANGED, PROMPTS_CHANGED, "notifications/message"] as const;

const cleanups: Array<() => Promise<unknown>> = [];
/** Runs `cleanup` after the test, last registered first. */
function defer(cleanup: () => Promise<unknown>): void {
  cleanups.push(cleanup);
}

afterEach(async (context) => {
  if (context.task.result?.state === "fail" && stderr.length > 0) process.stderr.write(stderr.join(""));
  stderr.length = 0;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

function newClient(era: "legacy" | "modern"): Client {
  return new Client(
    { name: "fixtures-test", version: "1.0.0" },
    era === "modern" ? { versionNegotiation: { mode: "auto", probe: { timeoutMs: 10_000 } } } : {},
  );
}

async function connectHttp(url: string, era: "legacy" | "modern"): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = newClient(era);
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  defer(() => client.close());
  return { client, transport };
}

/** Spawns `node --import tsx <script>`; its stderr is kept in `stderr` (and drained, so it never blocks the child). */
async function connectStdio(script: string, env: Record<string, string>, era: "legacy" | "modern"): Promise<Client> {
  const client = newClient(era);
  const transport = new StdioClientTransport({ command: process.execPath, args: ["--import", "tsx", script], cwd: BROKER_DIR, env, stderr: "pipe" });
  transport.stderr?.on("data", (chunk: Buffer) => stderr.push(chunk.toString("utf8")));
  await client.connect(transport);
  defer(() => client.close());
  return client;
}

/** Child stderr of the current test, printed when it fails. */
const stderr: string[] = [];

function subscriptionIdOf(notification: Notification): unknown {
  return notification.params?._meta?.[SUBSCRIPTION_ID_META_KEY];
}

function textOf(result: { content?: unknown }): string {
  const [first] = (result.content ?? []) as Array<{ type: string; text?: string }>;
  return first?.type === "text" ? (first.text ?? "") : "";
}

/** Polls a server-side condition that has no event of its own (e.g. a socket noticed closing). */
async function waitUntil(condition: () => boolean, label: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${label}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function withTimeout<T>(promise: Promise<T>, label: string, timeoutMs = 10_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${label}`)), timeoutMs);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

describe("legacy HTTP backend (sessionful)", () => {
  test("lists tools, delivers resources/updated only while subscribed, and counts subscriptions", async () => {
    const testServer = createTestServer({ name: "legacy-http" });
    const backend = await startLegacyHttpBackend(testServer);
    defer(() => backend.close());
    const { client, transport } = await connectHttp(backend.url, "legacy");
    const notes = new NotificationRecorder(client, ALL_NOTIFICATIONS);

    expect(client.getProtocolEra()).toBe("legacy");
    expect(client.getServerCapabilities()?.resources).toEqual({ subscribe: true, listChanged: true });
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).toEqual(["echo", "add", "slow", "fail", "emit_update", "add_tool", "remove_tool"]);
    const sessionId = transport.sessionId!;
    expect(backend.sessionIds()).toEqual([sessionId]);
    await backend.waitForStandaloneStream(sessionId);

    await client.subscribeResource({ uri: "test://static/a" });
    expect(testServer.stats.subscribeCount("test://static/a")).toBe(1);
    expect(testServer.stats.subscribedUris()).toEqual(["test://static/a"]);

    testServer.emitUpdate("test://static/b"); // not subscribed: must not arrive
    testServer.emitUpdate("test://static/a");
    await notes.waitFor(UPDATED, (n) => updatedUri(n) === "test://static/a");
    // One GET stream, in order: had b been sent, it would have arrived before a.
    expect(notes.all(UPDATED).map(updatedUri)).toEqual(["test://static/a"]);
    expect(await client.readResource({ uri: "test://static/a" })).toMatchObject({ contents: [{ text: "static-a revision 1" }] });

    await client.unsubscribeResource({ uri: "test://static/a" });
    expect(testServer.stats.unsubscribeCount("test://static/a")).toBe(1);
    expect(testServer.stats.subscribedUris()).toEqual([]);
    const mark = notes.mark();
    testServer.emitUpdate("test://static/a");
    testServer.emitListChanged("prompts"); // a fence on the same stream
    await notes.waitFor(PROMPTS_CHANGED, undefined, { since: mark });
    expect(notes.all(UPDATED, undefined, mark)).toEqual([]);
  });

  test("tool calls: progress and log while running, tool errors, list changes from a tool and in-process", async () => {
    const testServer = createTestServer({ name: "legacy-http" });
    const backend = await startLegacyHttpBackend(testServer);
    defer(() => backend.close());
    const { client, transport } = await connectHttp(backend.url, "legacy");
    const notes = new NotificationRecorder(client, ALL_NOTIFICATIONS);
    await backend.waitForStandaloneStream(transport.sessionId!);

    expect(textOf(await client.callTool({ name: "echo", arguments: { text: "hi" } }))).toBe("hi");
    expect(await client.callTool({ name: "add", arguments: { a: 2, b: 3 } })).toMatchObject({ structuredContent: { sum: 5 } });
    const progress: number[] = [];
    const slow = await client.callTool({ name: "slow", arguments: { ms: 20 } }, { onprogress: (p) => progress.push(p.progress) });
    expect(textOf(slow)).toBe("waited 20ms");
    expect(progress).toEqual([1, 2, 3, 4]);
    expect(notes.all("notifications/message")).toHaveLength(1);
    expect(await client.callTool({ name: "fail", arguments: {} })).toMatchObject({ isError: true });

    await client.callTool({ name: "add_tool", arguments: { name: "dynamic_one" } });
    await notes.waitFor(TOOLS_CHANGED);
    expect((await client.listTools()).tools.map((tool) => tool.name)).toContain("dynamic_one");
    expect(textOf(await client.callTool({ name: "dynamic_one", arguments: {} }))).toBe("called dynamic_one");

    const mark = notes.mark();
    testServer.setTools([]);
    await notes.waitFor(TOOLS_CHANGED, undefined, { since: mark });
    expect((await client.listTools()).tools.map((tool) => tool.name)).not.toContain("dynamic_one");
    expect(testServer.stats.toolCalls.get("dynamic_one")).toBe(1);
  });

  test("resources, templates with an embedded link, prompts and completion", async () => {
    const testServer = createTestServer({ name: "legacy-http" });
    const backend = await startLegacyHttpBackend(testServer);
    defer(() => backend.close());
    const { client } = await connectHttp(backend.url, "legacy");

    const { resources } = await client.listResources();
    expect(resources.map((resource) => resource.uri)).toEqual(["test://static/a", "test://static/b", "test://odd/a%20b?x=1#frag"]);
    expect((await client.listResourceTemplates()).resourceTemplates.map((template) => template.uriTemplate)).toEqual(["test://items/{id}"]);
    expect(await client.readResource({ uri: "test://odd/a%20b?x=1#frag" })).toMatchObject({
      contents: [{ uri: "test://odd/a%20b?x=1#frag", text: "odd revision 0" }],
    });
    const item = await client.readResource({ uri: "test://items/42" });
    expect(item.contents.map((content) => content.uri)).toEqual(["test://items/42", "test://static/a"]);
    const [itemJson] = item.contents;
    expect(JSON.parse((itemJson as { text: string }).text)).toMatchObject({ id: "42", related: { type: "resource_link", uri: "test://static/a" } });
    await expect(client.subscribeResource({ uri: "test://missing" })).rejects.toMatchObject({ data: { uri: "test://missing" } });
    expect(testServer.stats.subscribeCount("test://missing")).toBe(1);

    expect(await client.getPrompt({ name: "greet", arguments: { name: "bob" } })).toMatchObject({
      messages: [{ role: "user", content: { type: "text", text: "Hello, bob!" } }],
    });
    const completion = await client.complete({ ref: { type: "ref/prompt", name: "greet" }, argument: { name: "name", value: "al" } });
    expect(completion.completion.values).toEqual(["alice", "alicia"]);
  });

  test("DELETE ends the session; an expired session answers 404", async () => {
    const testServer = createTestServer({ name: "legacy-http" });
    const backend = await startLegacyHttpBackend(testServer);
    defer(() => backend.close());

    const first = await connectHttp(backend.url, "legacy");
    await first.client.subscribeResource({ uri: "test://static/a" });
    expect(testServer.stats.liveConnections).toBe(1);
    await first.transport.terminateSession();
    expect(backend.sessionIds()).toEqual([]);
    expect(testServer.stats.liveConnections).toBe(0);
    expect(testServer.stats.subscribedUris()).toEqual([]);

    const second = await connectHttp(backend.url, "legacy");
    await backend.expireSession(second.transport.sessionId!);
    await expect(second.client.callTool({ name: "echo", arguments: { text: "x" } })).rejects.toThrow(/404|not found/i);
  });

  test("subscribe: false and listChanged: false are advertised and honored", async () => {
    const testServer = createTestServer({ name: "plain", subscribe: false, listChanged: false });
    const backend = await startLegacyHttpBackend(testServer);
    defer(() => backend.close());
    const { client } = await connectHttp(backend.url, "legacy");

    expect(client.getServerCapabilities()).toMatchObject({ resources: { listChanged: false }, tools: { listChanged: false } });
    expect(client.getServerCapabilities()?.resources?.subscribe).toBeUndefined();
    await expect(client.subscribeResource({ uri: "test://static/a" })).rejects.toMatchObject({ code: -32601 });
  });
});

describe("modern HTTP backend (createMcpHandler)", () => {
  test("negotiates the modern era; a listen stream gets updates tagged with its subscription id", async () => {
    const testServer = createTestServer({ name: "modern-http" });
    const backend = await startModernHttpBackend(testServer);
    defer(() => backend.close());
    const { client } = await connectHttp(backend.url, "modern");
    const notes = new NotificationRecorder(client, ALL_NOTIFICATIONS);

    expect(client.getProtocolEra()).toBe("modern");
    expect(client.getServerCapabilities()?.resources).toEqual({ subscribe: true, listChanged: true });
    expect((await client.listTools()).tools.map((tool) => tool.name)).toContain("echo");

    const subscription = await client.listen({ resourceSubscriptions: ["test://static/a"], toolsListChanged: true });
    expect(subscription.honoredFilter).toEqual({ resourceSubscriptions: ["test://static/a"], toolsListChanged: true });
    const [listenId] = [...testServer.stats.openListens.keys()];
    expect(listenId).toEqual(expect.any(String));

    testServer.emitUpdate("test://static/b"); // not in the filter
    testServer.emitUpdate("test://static/a");
    const updated = await notes.waitFor(UPDATED);
    expect(updatedUri(updated)).toBe("test://static/a");
    expect(subscriptionIdOf(updated)).toBe(listenId);

    await client.callTool({ name: "add_tool", arguments: { name: "dynamic_two" } });
    expect(subscriptionIdOf(await notes.waitFor(TOOLS_CHANGED))).toBe(listenId);
    expect(notes.all(UPDATED).map(updatedUri)).toEqual(["test://static/a"]);

    await subscription.close();
    expect(await subscription.closed).toBe("local");
    await waitUntil(() => testServer.stats.openListens.size === 0, "the listen stream to close on the server");
  });

  test("closing the backend ends open listen streams gracefully", async () => {
    const testServer = createTestServer({ name: "modern-http" });
    const backend = await startModernHttpBackend(testServer);
    const { client } = await connectHttp(backend.url, "modern");
    const subscription = await client.listen({ resourcesListChanged: true });
    await backend.close();
    expect(await withTimeout(subscription.closed, "the listen stream to end")).toBe("graceful");
  });

  test("a legacy client is served by the stateless fallback", async () => {
    const testServer = createTestServer({ name: "modern-http" });
    const backend = await startModernHttpBackend(testServer);
    defer(() => backend.close());
    const { client, transport } = await connectHttp(backend.url, "legacy");

    expect(client.getProtocolEra()).toBe("legacy");
    expect(transport.sessionId).toBeUndefined();
    expect(textOf(await client.callTool({ name: "echo", arguments: { text: "stateless" } }))).toBe("stateless");
  });
});

describe("stdio test backend", () => {
  test("legacy: connects and calls echo", async () => {
    const client = await connectStdio(STDIO_BACKEND, { TEST_SERVER_NAME: "stdio-one" }, "legacy");
    expect(client.getServerVersion()?.name).toBe("stdio-one");
    expect(textOf(await client.callTool({ name: "echo", arguments: { text: "over stdio" } }))).toBe("over stdio");
  });

  test("modern: a listen stream gets the update emit_update sends", async () => {
    const client = await connectStdio(STDIO_BACKEND, { TEST_SERVER_NAME: "stdio-two" }, "modern");
    const notes = new NotificationRecorder(client, ALL_NOTIFICATIONS);
    expect(client.getProtocolEra()).toBe("modern");

    await client.listen({ resourceSubscriptions: ["test://items/7"] });
    await client.callTool({ name: "emit_update", arguments: { uri: "test://static/b" } }); // not in the filter
    await client.callTool({ name: "emit_update", arguments: { uri: "test://items/7" } });
    const updated = await notes.waitFor(UPDATED);
    expect(updatedUri(updated)).toBe("test://items/7");
    expect(subscriptionIdOf(updated)).toEqual(expect.any(String));
    expect(notes.all(UPDATED)).toHaveLength(1);
  });
});

describe("demo backend", () => {
  async function filesDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "demo-backend-test-"));
    defer(() => rm(dir, { recursive: true, force: true }));
    return dir;
  }

  test("legacy: counter, unsubscribe, file list and file updates, extra tool", async () => {
    const client = await connectStdio(DEMO_BACKEND, { DEMO_FILES_DIR: await filesDir() }, "legacy");
    const notes = new NotificationRecorder(client, ALL_NOTIFICATIONS);
    expect(client.getServerVersion()?.name).toBe("mcp-broker-demo");
    expect(client.getServerCapabilities()).toMatchObject({
      resources: { subscribe: true, listChanged: true },
      tools: { listChanged: true },
      prompts: { listChanged: true },
    });

    await client.subscribeResource({ uri: "demo://counter" });
    expect(textOf(await client.callTool({ name: "bump_counter", arguments: { by: 2 } }))).toBe("counter = 2");
    await notes.waitFor(UPDATED, (n) => updatedUri(n) === "demo://counter");
    expect(await client.readResource({ uri: "demo://counter" })).toMatchObject({ contents: [{ text: "2" }] });

    await client.unsubscribeResource({ uri: "demo://counter" });
    const afterUnsubscribe = notes.mark();
    await client.callTool({ name: "bump_counter", arguments: {} });
    // stdio is ordered: an update sent during the call would have arrived before its result.
    expect(notes.all(UPDATED, (n) => updatedUri(n) === "demo://counter", afterUnsubscribe)).toEqual([]);

    const beforeWrite = notes.mark();
    await client.callTool({ name: "write_file", arguments: { name: "notes.txt", content: "one" } });
    await notes.waitFor(RESOURCES_CHANGED, undefined, { since: beforeWrite });
    expect((await client.listResources()).resources.map((resource) => resource.uri)).toEqual(["demo://clock", "demo://counter", "demo://files/notes.txt"]);

    await client.subscribeResource({ uri: "demo://files/notes.txt" });
    await client.callTool({ name: "write_file", arguments: { name: "notes.txt", content: "two" } });
    await notes.waitFor(UPDATED, (n) => updatedUri(n) === "demo://files/notes.txt");
    expect(await client.readResource({ uri: "demo://files/notes.txt" })).toMatchObject({ contents: [{ text: "two" }] });

    const beforeDelete = notes.mark();
    await client.callTool({ name: "delete_file", arguments: { name: "notes.txt" } });
    await notes.waitFor(RESOURCES_CHANGED, undefined, { since: beforeDelete });

    await client.callTool({ name: "toggle_extra_tool", arguments: {} });
    await notes.waitFor(TOOLS_CHANGED);
    expect((await client.listTools()).tools.map((tool) => tool.name)).toContain("extra");

    const prompt = await client.getPrompt({ name: "summarize", arguments: { uri: "demo://counter" } });
    expect(prompt.messages[1]).toMatchObject({ content: { type: "resource", resource: { uri: "demo://counter", text: "3" } } });
    // Never subscribed to the clock, which ticks every second.
    expect(notes.all(UPDATED, (n) => updatedUri(n) === "demo://clock")).toEqual([]);
  });

  test("modern: listen gets counter updates tagged with the subscription id, and not the clock", async () => {
    const client = await connectStdio(DEMO_BACKEND, { DEMO_FILES_DIR: await filesDir() }, "modern");
    const notes = new NotificationRecorder(client, ALL_NOTIFICATIONS);
    expect(client.getProtocolEra()).toBe("modern");

    const subscription = await client.listen({ resourceSubscriptions: ["demo://counter"], resourcesListChanged: true });
    expect(subscription.honoredFilter).toEqual({ resourceSubscriptions: ["demo://counter"], resourcesListChanged: true });
    await client.callTool({ name: "bump_counter", arguments: {} });
    const updated = await notes.waitFor(UPDATED);
    expect(updatedUri(updated)).toBe("demo://counter");
    expect(subscriptionIdOf(updated)).toEqual(expect.any(String));

    await client.callTool({ name: "write_file", arguments: { name: "new.txt", content: "x" } });
    expect(subscriptionIdOf(await notes.waitFor(RESOURCES_CHANGED))).toBe(subscriptionIdOf(updated));
    expect(notes.all(UPDATED, (n) => updatedUri(n) === "demo://clock")).toEqual([]);
  });

  test("exits with code 0 when stdin closes, removing its default temp folder", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", DEMO_BACKEND], { cwd: BROKER_DIR, stdio: ["pipe", "ignore", "pipe"] });
    defer(async () => {
      if (child.exitCode === null) child.kill("SIGKILL");
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const ready = new Promise<string>((resolve) => {
      createInterface({ input: child.stderr }).on("line", (line) => {
        const record = JSON.parse(line) as { filesDir?: string };
        if (record.filesDir !== undefined) resolve(record.filesDir);
      });
    });
    const dir = await withTimeout(ready, "the demo backend to start");
    await access(join(dir, "hello.txt"));

    child.stdin.end();
    expect(await withTimeout(exited, "the demo backend to exit")).toBe(0);
    await expect(access(dir)).rejects.toThrow();
  });
});
