import type { Client, McpSubscription } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, startModernHttpBackend, type HttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { NotificationRecorder } from "../fixtures/notification-recorder.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

const TOOLS_CHANGED = "notifications/tools/list_changed";
const PROMPTS_CHANGED = "notifications/prompts/list_changed";
const RESOURCES_CHANGED = "notifications/resources/list_changed";
const LIST_METHODS = [TOOLS_CHANGED, PROMPTS_CHANGED, RESOURCES_CHANGED] as const;

/**
 * List changes end to end: backends announce (or, without `listChanged`, are re-listed), the
 * broker reloads debounced, diffs, and tells each client only about lists that really changed and
 * that it asked for.
 */
describe("list changes", () => {
  let legacyServer: TestServer;
  let modernServer: TestServer;
  let silentServer: TestServer;
  let legacyBackend: LegacyHttpBackend;
  let modernBackend: HttpBackend;
  let silentBackend: LegacyHttpBackend;
  let running: RunningBroker;
  let closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    legacyServer = createTestServer({ name: "legacy-lists" });
    modernServer = createTestServer({ name: "modern-lists" });
    silentServer = createTestServer({ name: "silent-lists", listChanged: false });
    legacyBackend = await startLegacyHttpBackend(legacyServer);
    modernBackend = await startModernHttpBackend(modernServer);
    silentBackend = await startLegacyHttpBackend(silentServer);
    running = await startBroker({
      backends: [
        { id: "leg", url: legacyBackend.url, era: "legacy" },
        { id: "mod", url: modernBackend.url, era: "modern" },
        { id: "quiet", url: silentBackend.url, era: "legacy", relistIntervalMs: 300 },
      ],
      lists: { debounceMs: 100 },
    });
  }, 60_000);

  afterEach(async () => {
    await Promise.all(closers.map((close) => close().catch(() => undefined)));
    closers = [];
  });

  afterAll(async () => {
    await running?.close();
    await Promise.all([legacyBackend?.close(), modernBackend?.close(), silentBackend?.close()]);
  });

  async function legacyClient(): Promise<{ client: Client; notes: NotificationRecorder }> {
    const client = await connectClient(running.url, "legacy");
    closers.push(() => client.close());
    return { client, notes: new NotificationRecorder(client, LIST_METHODS) };
  }

  async function modernClient(filter: Parameters<Client["listen"]>[0]): Promise<{ client: Client; notes: NotificationRecorder; listen: McpSubscription }> {
    const client = await connectClient(running.url, "modern");
    const notes = new NotificationRecorder(client, LIST_METHODS);
    const listen = await client.listen(filter);
    closers.push(async () => {
      await listen.close();
      await client.close();
    });
    return { client, notes, listen };
  }

  /** Every scheduled reload has run and its notifications have had time to arrive. */
  async function settled(): Promise<void> {
    expect(await running.broker.whenReady(10_000)).toBe(true);
    await new Promise((r) => setTimeout(r, 150));
  }

  const toolNames = async (client: Client) => (await client.listTools()).tools.map((t) => t.name);

  it("turns a burst of changes into one list_changed per interested client, with the new list", async () => {
    const legacy = await legacyClient();
    const tools = await modernClient({ toolsListChanged: true });
    const promptsOnly = await modernClient({ promptsListChanged: true });
    legacyServer.addTool("burst_a");
    legacyServer.addTool("burst_b");
    legacyServer.removeTool("burst_a");
    legacyServer.addTool("burst_c");

    await legacy.notes.waitFor(TOOLS_CHANGED);
    await tools.notes.waitFor(TOOLS_CHANGED);
    await settled();
    expect(legacy.notes.all(TOOLS_CHANGED)).toHaveLength(1);
    expect(tools.notes.all(TOOLS_CHANGED)).toHaveLength(1);
    expect(tools.notes.all(TOOLS_CHANGED)[0]?.params?._meta?.["io.modelcontextprotocol/subscriptionId"]).toEqual(expect.any(String));
    expect(promptsOnly.notes.received).toEqual([]);
    const names = await toolNames(legacy.client);
    expect(names).toEqual(expect.arrayContaining(["leg__burst_b", "leg__burst_c"]));
    expect(names).not.toContain("leg__burst_a");
    expect(legacy.notes.all(PROMPTS_CHANGED)).toEqual([]);
  });

  it("announces nothing when a backend's list_changed changed nothing", async () => {
    const legacy = await legacyClient();
    const modern = await modernClient({ toolsListChanged: true, resourcesListChanged: true });
    legacyServer.emitListChanged("tools");
    modernServer.emitListChanged("resources");
    await settled();
    expect(legacy.notes.received).toEqual([]);
    expect(modern.notes.received).toEqual([]);

    // The same clients do hear a real change, so the silence above was not deafness.
    modernServer.addTool("modern_extra");
    await modern.notes.waitFor(TOOLS_CHANGED);
    await legacy.notes.waitFor(TOOLS_CHANGED);
    expect(await toolNames(legacy.client)).toContain("mod__modern_extra");
  });

  it("re-lists a backend without listChanged on its schedule and announces what changed", async () => {
    const legacy = await legacyClient();
    silentServer.addTool("quiet_tool"); // the backend tells no one
    await legacy.notes.waitFor(TOOLS_CHANGED, () => true, { timeoutMs: 5_000 });
    expect(await toolNames(legacy.client)).toContain("quiet__quiet_tool");
  });

  it("removes a backend's items when it drops and brings them back when it returns", async () => {
    const server = createTestServer({ name: "comes-and-goes" });
    let backend = await startLegacyHttpBackend(server);
    const port = Number(new URL(backend.url).port);
    const broker = await startBroker({
      backends: [
        { id: "stay", url: legacyBackend.url, era: "legacy" },
        { id: "flaky", url: backend.url, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 100 },
      ],
      lists: { debounceMs: 50 },
    });
    try {
      const client = await connectClient(broker.url, "legacy");
      closers.push(() => client.close());
      const notes = new NotificationRecorder(client, LIST_METHODS);
      expect(await toolNames(client)).toContain("flaky__echo");

      await backend.close();
      await notes.waitFor(TOOLS_CHANGED);
      await notes.waitFor(RESOURCES_CHANGED);
      const without = await toolNames(client);
      expect(without.some((name) => name.startsWith("flaky__"))).toBe(false);
      expect(without).toContain("stay__echo");
      // Calling a tool of the missing backend says it is unavailable, at once, not a hang.
      await expect(client.callTool({ name: "flaky__echo", arguments: { text: "x" } })).rejects.toMatchObject({ code: -32000, data: { backend: "flaky" } });

      const mark = notes.mark();
      backend = await startLegacyHttpBackend(server, port);
      await notes.waitFor(TOOLS_CHANGED, () => true, { since: mark, timeoutMs: 10_000 });
      await eventually(async () => (await toolNames(client)).includes("flaky__echo"), "the backend's tools back");
    } finally {
      await broker.close();
      await backend.close();
    }
  }, 30_000);
});
