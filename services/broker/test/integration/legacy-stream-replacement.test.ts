import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";
import { openSse } from "../helpers/raw-http.js";

/**
 * A client whose GET stream went half-open opens another one without Last-Event-ID: what went
 * onto the old stream may never have been read, so the new one must announce everything once.
 * Real broker, real SSE streams, a real backend.
 */
describe("a replaced legacy GET stream", () => {
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let running: RunningBroker;

  beforeAll(async () => {
    server = createTestServer({ name: "fixture" });
    backend = await startLegacyHttpBackend(server);
    running = await startBroker({ backends: [{ id: "fixture", url: backend.url, era: "legacy" }] });
  }, 60_000);

  afterAll(async () => {
    await running?.close();
    await backend?.close();
  });

  it("opens each stream with an SSE retry drawn between 0.5 and 1.5 s (a dead instance's clients come back spread out)", async () => {
    const init = await post(running.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const headers = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "", "mcp-protocol-version": "2025-11-25", accept: "text/event-stream" };
    const retries: number[] = [];
    for (let i = 0; i < 8; i++) {
      const stream = await openSse(running.url, headers);
      await eventually(() => stream.retry !== undefined, "the stream's retry");
      retries.push(stream.retry ?? 0);
      stream.close();
    }
    for (const retry of retries) {
      expect(retry).toBeGreaterThanOrEqual(500);
      expect(retry).toBeLessThanOrEqual(1_500);
    }
    expect(new Set(retries).size).toBeGreaterThan(1);
  });

  it("starts each stream with a priming event (an id, empty data): a client cut off before any event arrives resumes from it and gets exactly what it missed", async () => {
    const init = await post(running.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const sessionId = init.headers.get("mcp-session-id") ?? "";
    const headers = { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" };
    await post(running.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
    const uri = "fixture+test://static/b";
    expect((await post(running.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri } }, headers)).json).toMatchObject({ result: {} });

    const first = await openSse(running.url, { ...headers, accept: "text/event-stream" });
    await eventually(() => first.primedId !== undefined, "the priming event");
    const primed = first.primedId ?? "";
    first.close(); // gone before any event: all the client has is the primed id
    const delivered = () => running.broker.fanout.deliveries().resourceUpdated;
    const before = delivered();
    for (let i = 0; i < 2; i++) server.emitUpdate("test://static/b");
    await eventually(() => delivered() === before + 2, "two updates delivered to the session");

    const resumed = await openSse(running.url, { ...headers, accept: "text/event-stream", "last-event-id": primed });
    await eventually(() => resumed.events.length >= 2, "the two updates replayed");
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(resumed.events.map((e) => (e.data as { params?: { uri?: string } }).params?.uri)).toEqual([uri, uri]);
    // Primed again, with where this stream starts from.
    expect(resumed.primedId).toBe(primed);
    resumed.close();
  });

  it("sends no priming event to a client of a revision before 2025-11-25 (its SSE handling may not take empty data)", async () => {
    const init = await post(running.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const headers = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "", "mcp-protocol-version": "2025-06-18", accept: "text/event-stream" };
    const stream = await openSse(running.url, headers);
    await eventually(() => stream.retry !== undefined, "the stream's retry");
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(stream.primedId).toBeUndefined();
    stream.close();
  });

  it("re-announces every subscription and the three lists on the replacement stream", async () => {
    const init = await post(running.url, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const sessionId = init.headers.get("mcp-session-id") ?? "";
    const headers = { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" };
    await post(running.url, { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
    const uri = "fixture+test://static/a";
    expect((await post(running.url, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri } }, headers)).json).toMatchObject({ result: {} });

    // A stream nobody reads: the updates go into its socket and stay there.
    const unread = await new Promise<{ close(): void }>((resolve, reject) => {
      const req = request(running.url, { method: "GET", headers: { ...headers, accept: "text/event-stream" } }, (res) => {
        res.pause();
        resolve({ close: () => req.destroy() });
      });
      req.on("error", () => undefined);
      req.on("response", (res) => (res.statusCode === 200 ? undefined : reject(new Error(`GET answered ${res.statusCode}`))));
      req.end();
    });
    const session = running.broker.sessions.legacySession(sessionId, "anonymous");
    const delivered = () => running.broker.fanout.deliveries().resourceUpdated;
    const before = delivered();
    for (let i = 0; i < 3; i++) server.emitUpdate("test://static/a");
    await eventually(() => delivered() === before + 3, "three updates written to the unread stream");
    expect(session?.subscriptions()).toEqual([uri]);

    const replacement = await openSse(running.url, { ...headers, accept: "text/event-stream" });
    await eventually(() => replacement.events.length >= 4, "the re-announcement");
    expect(replacement.events.map((e) => (e.data as { method: string; params?: { uri?: string } })).map((m) => m.params?.uri ?? m.method)).toEqual([
      uri,
      "notifications/tools/list_changed",
      "notifications/prompts/list_changed",
      "notifications/resources/list_changed",
    ]);
    replacement.close();
    unread.close();
  });
});
