import { PassThrough, Writable } from "node:stream";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type LegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer, type TestServer } from "../fixtures/test-server.js";
import { eventually, startBroker, type RunningBroker } from "../helpers/harness.js";
import { serveStdio } from "../../src/stdio/stdio-server.js";

type Message = { id?: unknown; method?: string; result?: Record<string, unknown>; error?: { code: number; message: string; data?: Record<string, unknown> }; params?: Record<string, unknown> };

const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

/**
 * The stdio server in this process, on streams the test controls: a client that stops reading, one
 * that closes its stdout, listens the broker ends, and messages the HTTP edge refuses too.
 */
describe("stdio server", () => {
  let server: TestServer;
  let backend: LegacyHttpBackend;
  let running: RunningBroker;
  let open: { input: PassThrough; done: Promise<void> }[] = [];

  beforeAll(async () => {
    server = createTestServer({ name: "stdio-server-backend" });
    backend = await startLegacyHttpBackend(server);
    running = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy" }], subscriptions: { releaseGraceMs: 0 }, server: { maxBodyBytes: 1_000 } });
  }, 60_000);

  afterEach(async () => {
    for (const { input } of open) input.end();
    await Promise.all(open.map(({ done }) => done));
    open = [];
  });

  afterAll(async () => {
    await running?.close();
    await backend?.close();
  });

  /** A stdio client whose stdout is read only while `reading` is on. */
  function stdio(options: { maxQueuedBytes?: number } = {}) {
    const input = new PassThrough();
    const received: Message[] = [];
    let partial = "";
    let reading = true;
    let held: (() => void)[] = [];
    const output = new Writable({
      highWaterMark: 1024,
      write(chunk: Buffer, _encoding, callback) {
        const take = () => {
          partial += chunk.toString("utf8");
          let newline: number;
          while ((newline = partial.indexOf("\n")) >= 0) {
            received.push(JSON.parse(partial.slice(0, newline)) as Message);
            partial = partial.slice(newline + 1);
          }
          callback();
        };
        if (reading) take();
        else held.push(take);
      },
    });
    const done = serveStdio(running.broker, { input, output, ...options });
    open.push({ input, done });
    return {
      received,
      output,
      done,
      send: (message: unknown) => input.write(`${typeof message === "string" ? message : JSON.stringify(message)}\n`),
      pause: () => (reading = false),
      resume: () => {
        reading = true;
        const waiting = held;
        held = [];
        for (const take of waiting) take();
      },
      answer: (id: unknown) => received.find((m) => m.id === id && m.method === undefined),
    };
  }

  it("ends serving, without a crash, when the client closes its stdout", async () => {
    const input = new PassThrough();
    const output = new Writable({
      write(_chunk, _encoding, callback) {
        callback(Object.assign(new Error("write EPIPE"), { code: "EPIPE" }));
      },
    });
    const done = serveStdio(running.broker, { input, output });
    input.write(`${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping", params: { _meta: MODERN_META } })}\n`);
    await done; // resolves (as when stdin ends): the CLI then stops the broker cleanly
    input.end();
  });

  it("answers malformed messages with -32600 and refuses an id still in use, as the HTTP edge does", async () => {
    const c = stdio();
    c.send({ jsonrpc: "2.0", id: 4, method: 5 });
    c.send({ jsonrpc: "2.0", id: 5 });
    c.send({ jsonrpc: "2.0", id: null, method: "ping" });
    c.send({ jsonrpc: "2.0", id: {}, method: "ping" });
    await eventually(() => c.received.length === 4, "four answers");
    expect(c.received.map((m) => [m.id, m.error?.code])).toEqual([
      [4, -32600],
      [5, -32600],
      [null, -32600],
      [null, -32600],
    ]);
    // A listen open under id 9: another request with that id is refused, and the listen stays.
    c.send({ jsonrpc: "2.0", id: 9, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://items/1"] }, _meta: MODERN_META } });
    await eventually(() => c.received.some((m) => m.method === "notifications/subscriptions/acknowledged"), "the acknowledgement");
    c.send({ jsonrpc: "2.0", id: 9, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://items/2"] }, _meta: MODERN_META } });
    await eventually(() => c.answer(9) !== undefined, "the refusal");
    expect(c.answer(9)?.error).toMatchObject({ code: -32600, message: expect.stringContaining("in use") as unknown });
    server.emitUpdate("test://items/1");
    await eventually(() => c.received.some((m) => m.method === "notifications/resources/updated"), "the update on the first listen");
  });

  it("counts the line limit in bytes, and answers an oversized request with its id", async () => {
    const c = stdio();
    c.send(`{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":${JSON.stringify(MODERN_META)},"pad":"${"€".repeat(400)}"}}`); // 400 characters, 1 200 bytes
    await eventually(() => c.received.length === 1, "the answer");
    expect(c.received[0]).toMatchObject({ id: 3, error: { code: -32600, message: expect.stringContaining("too large") as unknown } });
  });

  it("keeps the session as it was when initialize has bad params", async () => {
    const c = stdio();
    c.send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 2025, capabilities: {}, clientInfo: { name: "x", version: "1" } } });
    await eventually(() => c.answer(1) !== undefined, "the answer");
    expect(c.answer(1)?.error?.code).toBe(-32602);
    c.send({ jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "leg+test://items/1" } });
    await eventually(() => c.answer(2) !== undefined, "the answer");
    expect(c.answer(2)?.error?.message).toMatch(/initialize first/);
  });

  it("answers a listen the broker ends: with its result when it must be reopened, with the error when it failed", async () => {
    const c = stdio();
    c.send({ jsonrpc: "2.0", id: "a", method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://items/1"] }, _meta: MODERN_META } });
    await eventually(() => c.received.some((m) => m.method === "notifications/subscriptions/acknowledged"), "the acknowledgement");
    // As when this member was presumed dead by the cluster: every listen stream ends.
    void running.broker.sessions.endAll("test", 1_000);
    await eventually(() => c.answer("a") !== undefined, "the listen's result");
    expect(c.answer("a")?.result).toMatchObject({ resultType: "complete", _meta: { "io.modelcontextprotocol/subscriptionId": "a" } });
    // The id is free again, and a listen the cluster cuts over a lowered limit gets -32010.
    c.send({ jsonrpc: "2.0", id: "a", method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://items/1", "leg+test://items/2"] }, _meta: MODERN_META } });
    await eventually(() => c.received.filter((m) => m.method === "notifications/subscriptions/acknowledged").length === 2, "the second acknowledgement");
    const stream = running.broker.sessions.census(100).listens.streams.at(-1);
    expect(stream).toBeDefined();
    running.broker.sessions.revoke({ kind: "subscriptions.revoked", v: 1, principal: "stdio", sessionId: stream!.id, limit: "session", max: 1, resources: [{ backendId: "leg", uri: "test://items/2" }] } as never);
    await eventually(() => c.received.filter((m) => m.id === "a" && m.method === undefined).length === 2, "the listen's error");
    expect(c.received.filter((m) => m.id === "a" && m.method === undefined).at(-1)?.error).toMatchObject({ code: -32010, data: { limit: "session", max: 1 } });
  });

  it("does not buffer without bound for a client that stops reading: the session's updates wait, and arrive once it reads again", async () => {
    const c = stdio({ maxQueuedBytes: 16 * 1024 });
    c.send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "x", version: "1" } } });
    await eventually(() => c.answer(1) !== undefined, "initialize");
    c.send({ jsonrpc: "2.0", method: "notifications/initialized" });
    c.send({ jsonrpc: "2.0", id: 2, method: "resources/subscribe", params: { uri: "leg+test://items/1" } });
    c.send({ jsonrpc: "2.0", id: 3, method: "subscriptions/listen", params: { notifications: { resourceSubscriptions: ["leg+test://items/1"] }, _meta: MODERN_META } });
    await eventually(() => c.answer(2) !== undefined && c.received.some((m) => m.method === "notifications/subscriptions/acknowledged"), "subscribed twice");
    c.pause();
    const pad = "x".repeat(500);
    for (let i = 0; i < 200; i++) server.emitUpdate("test://items/1", { _meta: { pad, n: i } });
    await eventually(() => c.output.writableLength > 16 * 1024, "stdout to fill");
    await new Promise((resolve) => setTimeout(resolve, 300));
    // Bounded: the queue stopped growing at about the limit (200 updates of ~0.6 KB each on two streams would be ~240 KB).
    expect(c.output.writableLength).toBeLessThan(64 * 1024);
    c.resume();
    // The listen ended with its result (its client reopens it with its cursor) ...
    await eventually(() => c.answer(3) !== undefined, "the listen's result");
    expect(c.answer(3)?.result).toMatchObject({ resultType: "complete" });
    // ... and the legacy session is told what it missed once it reads again: past its history (64), one
    // `updated` from the cluster that stands for every update since the last one written (the
    // broker's own, so without the backend's _meta).
    const updates = () => c.received.filter((m) => m.method === "notifications/resources/updated");
    await eventually(() => updates().at(-1)?.params?._meta === undefined, "the resumption's update");
    expect(updates().at(-1)?.params).toEqual({ uri: "leg+test://items/1" });
    const written = updates().filter((m) => (m.params?._meta as { n?: number } | undefined)?.n !== undefined);
    expect(written.length).toBeLessThan(200);
  });
});
