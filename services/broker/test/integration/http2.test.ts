import { connect as connectTcp } from "node:net";
import type { ServerResponse } from "node:http";
import { connect, type ClientHttp2Session, type ClientHttp2Stream } from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { collectUpdates, connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };
const JSON_HEADERS = { "content-type": "application/json", accept: "application/json, text/event-stream" };

/** One request over an HTTP/2 connection, its whole answer read. */
function request(session: ClientHttp2Session, headers: Record<string, string>, body?: unknown): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": body === undefined ? "GET" : "POST", ":path": "/mcp", ...JSON_HEADERS, ...headers });
    let status = 0;
    let got: Record<string, unknown> = {};
    let text = "";
    stream.on("response", (h) => {
      status = Number(h[":status"]);
      got = h;
    });
    stream.setEncoding("utf8");
    stream.on("data", (chunk: string) => (text += chunk));
    stream.on("end", () => resolve({ status, headers: got, text }));
    stream.on("error", reject);
    stream.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** An event stream over HTTP/2: its status, and the data lines it has carried so far. */
function openStream(session: ClientHttp2Session, headers: Record<string, string>, body?: unknown): { stream: ClientHttp2Stream; status: Promise<number>; events: string[] } {
  const stream = session.request({ ":method": body === undefined ? "GET" : "POST", ":path": "/mcp", ...JSON_HEADERS, ...headers });
  const events: string[] = [];
  const status = new Promise<number>((resolve, reject) => {
    stream.once("response", (h) => resolve(Number(h[":status"])));
    stream.once("error", reject);
  });
  let buffered = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => {
    buffered += chunk;
    const lines = buffered.split("\n");
    buffered = lines.pop() ?? "";
    for (const line of lines) if (line.startsWith("data: ")) events.push(line.slice(6));
  });
  stream.on("error", () => undefined);
  stream.end(body === undefined ? undefined : JSON.stringify(body));
  return { stream, status, events };
}

/**
 * HTTP/2 without TLS (h2c, prior knowledge) on the broker's one port, beside HTTP/1.1: what a load
 * balancer speaking HTTP/2 to its backends sends. Sessions, streams and listens work over it as
 * over HTTP/1.1, many on one connection.
 */
describe("HTTP/2 (h2c) beside HTTP/1.1", () => {
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let running: RunningBroker;
  let session: ClientHttp2Session;

  beforeAll(async () => {
    server = createTestServer({ name: "h2-backend" });
    backend = await startLegacyHttpBackend(server);
    running = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy" }], subscriptions: { releaseGraceMs: 50 }, server: { requestTimeoutMs: 1_000 } });
    session = connect(new URL(running.url).origin);
    session.on("error", () => undefined);
  }, 60_000);

  afterAll(async () => {
    session?.destroy();
    await running?.close();
    await backend?.close();
  });

  it("serves a legacy session over HTTP/2: initialize, its stream, subscribe, and the update arrives", async () => {
    const init = await request(session, {}, { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "h2", version: "1" } } });
    expect(init.status).toBe(200);
    const sessionId = String(init.headers["mcp-session-id"]);
    const headers = { "mcp-session-id": sessionId, "mcp-protocol-version": "2025-11-25" };
    expect((await request(session, headers, { jsonrpc: "2.0", method: "notifications/initialized" })).status).toBe(202);
    const sse = openStream(session, { ...headers, accept: "text/event-stream" });
    expect(await sse.status).toBe(200);
    const subscribed = await request(session, headers, { jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "leg+test://static/a" } });
    expect(JSON.parse(subscribed.text)).toMatchObject({ id: 2, result: {} });
    // A stream outlives the request timeout (1 s here): only a request's body is bounded.
    await new Promise((resolve) => setTimeout(resolve, 1_300));
    server.emitUpdate("test://static/a");
    await eventually(() => sse.events.some((e) => e.includes("notifications/resources/updated") && e.includes("leg+test://static/a")), "the update over HTTP/2");

    // The client's stream ends (RST_STREAM), the connection stays: the session is no longer streaming.
    sse.stream.close();
    await eventually(() => running.broker.sessions.legacySessions().every((s) => !s.streaming), "the stream's end seen");
    expect(session.closed).toBe(false);
  });

  it("holds many listen streams on one connection, each told only its own updates", async () => {
    const listen = (uri: string) =>
      openStream(session, { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" }, { jsonrpc: "2.0", id: 1, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: [uri] }, _meta: MODERN_META } });
    const streams = Array.from({ length: 50 }, (_, i) => listen(`leg+test://items/${i}`));
    expect(new Set(await Promise.all(streams.map((s) => s.status)))).toEqual(new Set([200]));
    await eventually(() => streams.every((s) => s.events.some((e) => e.includes("notifications/subscriptions/acknowledged"))), "every acknowledgement");
    server.emitUpdate("test://items/7");
    const updated = (s: { events: string[] }) => s.events.some((e) => e.includes("notifications/resources/updated"));
    await eventually(() => updated(streams[7]!), "item 7's update", 3_000).catch(() => console.log(streams[7]!.events));
    expect(streams.filter(updated)).toEqual([streams[7]]);
    expect(running.broker.sessions.listenCount()).toBe(50);

    // The connection goes: every stream on it ends, and what they held is released.
    const other = connect(new URL(running.url).origin);
    const lone = openStream(other, { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" }, { jsonrpc: "2.0", id: 1, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://static/b"] }, _meta: MODERN_META } });
    expect(await lone.status).toBe(200);
    await eventually(() => running.broker.sessions.listenCount() === 51, "the other connection's listen");
    for (const s of streams) s.stream.close();
    await eventually(() => running.broker.sessions.listenCount() === 1, "the closed streams' listens ended").catch(() => console.log("after RST", running.broker.sessions.listenCount()));
    other.destroy();
    await eventually(() => running.broker.sessions.listenCount() === 0, "every listen ended").catch(() => console.log("after destroy", running.broker.sessions.listenCount()));
  });

  it("still serves HTTP/1.1 on the same port: an SDK client, and a request whose first packet is one byte", async () => {
    const client = await connectClient(running.url, "legacy");
    const updates = collectUpdates(client);
    await client.subscribeResource({ uri: "leg+test://static/b" });
    server.emitUpdate("test://static/b");
    await eventually(() => updates.includes("leg+test://static/b"), "the update over HTTP/1.1");
    await client.close();

    // "P" alone could begin the HTTP/2 preface ("PRI * HTTP/2.0"): the broker waits for more before it decides.
    const url = new URL(running.url);
    const socket = connectTcp(Number(url.port), url.hostname);
    await new Promise<void>((done) => socket.once("connect", done));
    let answer = "";
    socket.on("data", (chunk: Buffer) => (answer += chunk.toString("utf8")));
    socket.write("G");
    await new Promise((r) => setTimeout(r, 50));
    socket.write("ET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
    await new Promise((done) => socket.once("close", done));
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
  });

  it("answers 408 to a request whose body stalls past the request timeout, and resets its stream", async () => {
    const stream = session.request({ ":method": "POST", ":path": "/mcp", ...JSON_HEADERS, "content-length": "100" });
    stream.write('{"jsonrpc":"2.0",');
    const started = Date.now();
    const status = await new Promise<number>((resolve) => stream.once("response", (h) => resolve(Number(h[":status"]))));
    expect(status).toBe(408);
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    await new Promise((done) => stream.once("close", done));
    expect(session.closed).toBe(false);
  });

  it("closes an HTTP/2 connection that has no stream open for the keep-alive timeout, one that never opened any too", async () => {
    const idle = connect(new URL(running.url).origin);
    idle.on("error", () => undefined);
    await new Promise((done) => idle.once("connect", done));
    const started = Date.now();
    await new Promise((done) => idle.once("close", done));
    // Node's keep-alive timeout for HTTP/1.1 connections (5 s).
    expect(Date.now() - started).toBeGreaterThanOrEqual(4_500);
  }, 15_000);

  it("ends a connection that sends nothing within the request timeout", async () => {
    const url = new URL(running.url);
    const socket = connectTcp(Number(url.port), url.hostname);
    socket.on("error", () => undefined);
    const started = Date.now();
    await new Promise((done) => socket.once("close", done));
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
  });

  it("refuses HTTP/2 when server.http2 is false (HTTP/1.1 only)", async () => {
    const plain = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy" }], server: { http2: false } });
    try {
      const h2 = connect(new URL(plain.url).origin);
      const failed = new Promise<boolean>((resolve) => {
        h2.once("error", () => resolve(true));
        h2.once("close", () => resolve(true));
      });
      const stream = h2.request({ ":path": "/healthz" });
      stream.on("error", () => undefined);
      stream.end();
      expect(await failed).toBe(true);
      h2.destroy();
    } finally {
      await plain.close();
    }
  });

  it("a stopping broker ends its HTTP/2 connections, streams and all", async () => {
    const stopping = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy" }], server: { drainMs: 100 } });
    const h2 = connect(new URL(stopping.url).origin);
    h2.on("error", () => undefined);
    const listen = openStream(h2, { "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" }, { jsonrpc: "2.0", id: 1, method: "subscriptions/listen", params: { notifications: { toolsListChanged: true }, _meta: MODERN_META } });
    expect(await listen.status).toBe(200);
    const closed = new Promise((done) => h2.once("close", done));
    await stopping.close();
    await closed;
    expect(listen.stream.closed).toBe(true);
  });

  it("sees a stream the client reset before its response began as closed (its session is not left streaming)", async () => {
    const { createServer } = await import("node:http");
    const { serveH2cBeside } = await import("../../src/http/h2c.js");
    const { SseStream } = await import("../../src/http/sse-stream.js");
    let closed: boolean | undefined;
    const seen = new Promise<void>((resolve) => {
      const handle = (_req: unknown, res: ServerResponse) => {
        // The broker looks its session up first (a Redis read): the client resets meanwhile, and
        // the stream is made after the reset has closed the response.
        res.once("close", () =>
          setImmediate(() => {
            const sse = new SseStream(res, {});
            queueMicrotask(() => {
              closed = sse.closed;
              resolve();
            });
          }),
        );
      };
      const plain = createServer(handle);
      serveH2cBeside(plain, handle, { sniffTimeoutMs: 1_000, requestTimeoutMs: 1_000, idleTimeoutMs: 5_000 });
      plain.listen(0, "127.0.0.1", () => {
        const { port } = plain.address() as { port: number };
        const client = connect(`http://127.0.0.1:${port}`);
        client.on("error", () => undefined);
        const stream = client.request({ ":path": "/mcp" });
        stream.on("error", () => undefined);
        setTimeout(() => stream.close(), 20);
        void seen.then(() => {
          client.destroy();
          plain.close();
        });
      });
    });
    await seen;
    expect(closed).toBe(true);
  });
});
