import type { Client, McpSubscription } from "@modelcontextprotocol/client";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, startModernHttpBackend, type HttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { collectUpdates, connectClient, eventually, post, startBroker, type Era, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";

/**
 * Subscriptions end to end: in-repo backends (a legacy HTTP one that can push, a modern one
 * with subscriptions/listen, a legacy one that cannot push and is polled), SDK v2 clients in
 * both eras.
 */
describe("subscriptions", () => {
  let legacyServer: TestServer;
  let modernServer: TestServer;
  let pollServer: TestServer;
  let legacyBackend: LegacyHttpBackend;
  let modernBackend: HttpBackend;
  let pollBackend: LegacyHttpBackend;
  let running: RunningBroker;
  let clients: Client[] = [];

  beforeAll(async () => {
    legacyServer = createTestServer({ name: "legacy-backend" });
    modernServer = createTestServer({ name: "modern-backend" });
    pollServer = createTestServer({ name: "poll-backend", subscribe: false });
    legacyBackend = await startLegacyHttpBackend(legacyServer);
    modernBackend = await startModernHttpBackend(modernServer);
    pollBackend = await startLegacyHttpBackend(pollServer);
    const fast = { reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 200 };
    running = await startBroker({
      backends: [
        { id: "leg", url: legacyBackend.url, era: "legacy", ...fast },
        { id: "mod", url: modernBackend.url, era: "modern", ...fast },
        { id: "poll", url: pollBackend.url, era: "legacy", pollIntervalMs: 1_000, ...fast },
      ],
      subscriptions: { releaseGraceMs: 50, maxPerSession: 20 },
      lists: { debounceMs: 50 },
    });
  }, 60_000);

  afterEach(async () => {
    await Promise.all(clients.map((c) => c.close().catch(() => undefined)));
    clients = [];
  });

  afterAll(async () => {
    await running?.close();
    await Promise.all([legacyBackend?.close(), modernBackend?.close(), pollBackend?.close()]);
  });

  async function client(era: Era): Promise<Client> {
    const c = await connectClient(running.url, era);
    clients.push(c);
    return c;
  }

  /** Subscribes in the client's era; returns the listen handle for modern clients. */
  async function subscribe(c: Client, uris: string[]): Promise<McpSubscription | undefined> {
    if (c.getProtocolEra() === "modern") return c.listen({ resourceSubscriptions: uris });
    for (const uri of uris) await c.subscribeResource({ uri });
    return undefined;
  }

  it("gives several clients in both eras one upstream subscription, and every one of them the update", async () => {
    const clientsInBothEras = [await client("legacy"), await client("legacy"), await client("legacy"), await client("modern"), await client("modern")];
    const received = clientsInBothEras.map(collectUpdates);
    legacyServer.stats.resetCounters();
    const listens = await Promise.all(clientsInBothEras.map((c) => subscribe(c, ["leg+test://static/a"])));
    expect(legacyServer.stats.subscribeCount("test://static/a")).toBe(1);

    legacyServer.emitUpdate("test://static/a");
    await eventually(() => received.every((r) => r.length === 1), "the update at all five clients");
    expect(received.flat()).toEqual(Array(5).fill("leg+test://static/a"));

    // The last one to leave releases the upstream subscription (after the grace period).
    for (const c of clientsInBothEras.slice(0, 3)) await c.unsubscribeResource({ uri: "leg+test://static/a" });
    await listens[3]?.close();
    expect(legacyServer.stats.unsubscribeCount("test://static/a")).toBe(0);
    await listens[4]?.close();
    await eventually(() => legacyServer.stats.unsubscribeCount("test://static/a") === 1, "the upstream unsubscribe");
    expect(legacyServer.stats.subscribedUris()).toEqual([]);
  });

  it("keeps one listen stream towards a modern backend whose filter is the wanted set", async () => {
    const a = await client("legacy");
    const b = await client("modern");
    const [ra, rb] = [collectUpdates(a), collectUpdates(b)];
    await subscribe(a, ["mod+test://static/b"]);
    const listen = await subscribe(b, ["mod+test://static/b", "mod+test://items/42"]);
    expect(listen?.honoredFilter.resourceSubscriptions).toEqual(["mod+test://static/b", "mod+test://items/42"]);
    // The broker opens a new upstream listen before closing the old one; in the end one remains.
    const withResources = () => [...modernServer.stats.openListens.values()].filter((f) => (f.resourceSubscriptions ?? []).length > 0);
    await eventually(
      () => withResources().length === 1 && withResources()[0]?.resourceSubscriptions?.length === 2,
      "one backend listen whose filter holds the wanted set",
    );
    expect([...(withResources()[0]?.resourceSubscriptions ?? [])].sort()).toEqual(["test://items/42", "test://static/b"]);

    modernServer.emitUpdate("test://items/42");
    modernServer.emitUpdate("test://static/b");
    await eventually(() => ra.length === 1 && rb.length === 2, "updates from the modern backend");
    expect(ra).toEqual(["mod+test://static/b"]);
    expect([...rb].sort()).toEqual(["mod+test://items/42", "mod+test://static/b"]);
    await listen?.close();
  });

  it("sends ten concurrent clients with different subscriptions only their own updates", async () => {
    const ten = await Promise.all(Array.from({ length: 10 }, (_, i) => client(i % 2 === 0 ? "legacy" : "modern")));
    const received = ten.map(collectUpdates);
    const listens = await Promise.all(ten.map((c, i) => subscribe(c, [`leg+test://items/${i}`])));
    for (let i = 0; i < 10; i++) legacyServer.emitUpdate(`test://items/${i}`);
    legacyServer.emitUpdate("test://static/b"); // nobody's
    await eventually(() => received.every((r) => r.length >= 1), "each client's own update");
    received.forEach((r, i) => expect(r).toEqual([`leg+test://items/${i}`]));
    await Promise.all(listens.map(async (l) => l?.close()));
  });

  it("polls a backend that cannot push and reports content changes", async () => {
    const c = await client("legacy");
    const received = collectUpdates(c);
    await c.subscribeResource({ uri: "poll+test://static/a" });
    expect(pollServer.stats.subscribeCount("test://static/a")).toBe(0);
    pollServer.emitUpdate("test://static/a"); // bumps the revision that reads show
    await eventually(() => received.length === 1, "a polled update", 5_000);
    expect(received).toEqual(["poll+test://static/a"]);
    await c.unsubscribeResource({ uri: "poll+test://static/a" });
  });

  it("enforces the per-session limit with -32010 (legacy) and leaves refused URIs out of the honored filter (modern)", async () => {
    const limited = await startBroker({
      backends: [{ id: "leg", url: legacyBackend.url, era: "legacy" }],
      subscriptions: { maxPerSession: 2, releaseGraceMs: 0 },
    });
    try {
      const init = await post(limited.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
      const headers = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "" };
      const sub = (id: number, uri: string) => post(limited.url, { jsonrpc: "2.0", id, method: "resources/subscribe", params: { uri } }, headers);
      expect((await sub(2, "leg+test://static/a")).json).toMatchObject({ result: {} });
      expect((await sub(3, "leg+test://static/b")).json).toMatchObject({ result: {} });
      expect((await sub(4, "leg+test://static/a")).json).toMatchObject({ result: {} }); // idempotent, not counted twice
      expect((await sub(5, "leg+test://items/1")).json).toMatchObject({ error: { code: -32010, data: { limit: "session", max: 2 } } });
      const unsub = await post(limited.url, { jsonrpc: "2.0", id: 6, method: "resources/unsubscribe", params: { uri: "leg+test://never" } }, headers);
      expect(unsub.json).toMatchObject({ result: {} });

      const modern = await connectClient(limited.url, "modern");
      const listen = await modern.listen({ resourceSubscriptions: ["leg+test://static/a", "leg+test://static/b", "leg+test://items/9"] });
      expect(listen.honoredFilter.resourceSubscriptions).toEqual(["leg+test://static/a", "leg+test://static/b"]);
      await listen.close();
      await expect(modern.listen({ resourceSubscriptions: ["leg+nope://x"] })).rejects.toMatchObject({ code: -32602 });

      // A listen far over the limit: the first two are tried and honored, the rest refused untried.
      const many = Array.from({ length: 5_000 }, (_, i) => `leg+test://items/${i}`);
      const big = await modern.listen({ resourceSubscriptions: many });
      expect(big.honoredFilter.resourceSubscriptions).toEqual(many.slice(0, 2));
      expect(legacyServer.stats.subscribeCount("test://items/4999")).toBe(0);
      await big.close();
      await modern.close();

      // The acknowledgement says why each URI was left out (the first 100 of them).
      const raw = await openSse(
        limited.url,
        { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" },
        { jsonrpc: "2.0", id: 7, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: many.slice(0, 300) }, _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } },
      );
      await eventually(() => raw.events.length > 0, "the acknowledgement");
      const ack = raw.events[0]?.data as { method: string; params: { notifications: unknown; _meta: Record<string, unknown> } };
      expect(ack.method).toBe("notifications/subscriptions/acknowledged");
      expect(ack.params.notifications).toEqual({ resourceSubscriptions: many.slice(0, 2) });
      const refused = ack.params._meta["io.mcp-broker/refused"] as { uri: string; error: { code: number; message: string; data: Record<string, unknown> } }[];
      expect(refused).toHaveLength(100);
      expect(refused[0]).toEqual({ uri: many[2], error: { code: -32010, message: expect.stringContaining("at most 2 per session") as unknown, data: { limit: "session", max: 2, uri: many[2] } } });
      expect(refused.map(({ uri }) => uri)).toEqual(many.slice(2, 102));
      raw.close();
    } finally {
      await limited.close();
    }
  });

  it("refuses over the global limit in both eras, and says it is the total of every session", async () => {
    const limited = await startBroker({ backends: [{ id: "leg", url: legacyBackend.url, era: "legacy" }], subscriptions: { maxTotal: 1, releaseGraceMs: 0 } });
    try {
      const legacy = await connectClient(limited.url, "legacy");
      await legacy.subscribeResource({ uri: "leg+test://static/a" });
      await expect(legacy.subscribeResource({ uri: "leg+test://static/b" })).rejects.toMatchObject({ code: -32010, message: expect.stringContaining("at most 1 in total") as unknown, data: { limit: "global", max: 1 } });
      const raw = await openSse(
        limited.url,
        { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" },
        { jsonrpc: "2.0", id: 1, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://static/b"] }, _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} } } },
      );
      await eventually(() => raw.events.length > 0, "the acknowledgement");
      expect(raw.events[0]?.data).toMatchObject({
        params: { notifications: { resourceSubscriptions: [] }, _meta: { "io.mcp-broker/refused": [{ uri: "leg+test://static/b", error: { code: -32010, data: { limit: "global", max: 1 } } }] } },
      });
      raw.close();
      await legacy.close();
    } finally {
      await limited.close();
    }
  });

  it("releases everything when a session ends: DELETE, listen stream close, idle expiry", async () => {
    const shortLived = await startBroker({
      backends: [{ id: "leg", url: legacyBackend.url, era: "legacy" }],
      subscriptions: { releaseGraceMs: 0 },
      server: { sessionIdleMs: 300 },
    });
    try {
      legacyServer.stats.resetCounters();
      // DELETE (the SDK's terminateSession)
      const legacy = await connectClient(shortLived.url, "legacy");
      await legacy.subscribeResource({ uri: "leg+test://items/d" });
      expect(shortLived.broker.upstream.watched("leg")).toContain("test://items/d");
      await (legacy.transport as unknown as { terminateSession(): Promise<void> }).terminateSession();
      await eventually(() => legacyServer.stats.unsubscribeCount("test://items/d") === 1, "release after DELETE");
      await legacy.close();

      // Closing a listen stream
      const modern = await connectClient(shortLived.url, "modern");
      const listen = await modern.listen({ resourceSubscriptions: ["leg+test://items/l"] });
      await listen.close();
      await eventually(() => legacyServer.stats.unsubscribeCount("test://items/l") === 1, "release after the listen stream closed");
      await modern.close();

      // Idle expiry: a session with no GET stream and no request for sessionIdleMs
      const init = await post(shortLived.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "idle", version: "1" } } });
      const headers = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "" };
      await post(shortLived.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "leg+test://items/i" } }, headers);
      await eventually(() => legacyServer.stats.unsubscribeCount("test://items/i") === 1, "release after idle expiry", 5_000);
      expect((await post(shortLived.url, { jsonrpc: "2.0", id: 3, method: "ping" }, headers)).status).toBe(404);
      expect(shortLived.broker.sessions.legacySessions()).toEqual([]);
    } finally {
      await shortLived.close();
    }
  });

  it("does not end a session for idleness while a request of it runs: its idle time counts from the answer", async () => {
    const shortLived = await startBroker({ backends: [{ id: "leg", url: legacyBackend.url, era: "legacy" }], server: { sessionIdleMs: 1_000 } });
    try {
      const init = await post(shortLived.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "busy", version: "1" } } });
      const headers = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "" };
      const slow = await post(shortLived.url, { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "leg__slow", arguments: { ms: 2_500 } } }, headers);
      expect(slow.json).toMatchObject({ id: 2, result: { content: [{ text: "waited 2500ms" }] } });
      expect((await post(shortLived.url, { jsonrpc: "2.0", id: 3, method: "ping" }, headers)).status).toBe(200);
      await eventually(() => shortLived.broker.sessions.legacySessions().length === 0, "idle expiry after the answer", 5_000);
    } finally {
      await shortLived.close();
    }
  });

  it("re-establishes wanted subscriptions after a backend restart, without any client action", async () => {
    const server = createTestServer({ name: "restartable" });
    let backend = await startLegacyHttpBackend(server);
    const port = Number(new URL(backend.url).port);
    const broker = await startBroker({
      backends: [{ id: "rs", url: backend.url, era: "legacy", reconnect: { initialDelayMs: 50, maxDelayMs: 200 }, healthIntervalMs: 100 }],
      subscriptions: { releaseGraceMs: 0 },
    });
    try {
      const c = await connectClient(broker.url, "legacy");
      const received = collectUpdates(c);
      await c.subscribeResource({ uri: "rs+test://static/a" });
      expect(server.stats.subscribeCount("test://static/a")).toBe(1);

      await backend.close();
      await eventually(() => broker.broker.pool.get("rs").state !== "connected", "the broker to notice the backend is down");
      backend = await startLegacyHttpBackend(server, port);
      await eventually(() => server.stats.subscribeCount("test://static/a") === 2, "the re-subscribe after reconnect", 10_000);
      // What changed while the backend was away was never announced: the broker counts it as updated once.
      await eventually(() => received.length === 1, "the conservative update after the reconnect");
      received.length = 0;
      await eventually(async () => {
        server.emitUpdate("test://static/a");
        await new Promise((r) => setTimeout(r, 50));
        return received.length > 0;
      }, "an update after the restart");
      expect(new Set(received)).toEqual(new Set(["rs+test://static/a"]));
      await c.close();
    } finally {
      await broker.close();
      await backend.close();
    }
  }, 30_000);
});
