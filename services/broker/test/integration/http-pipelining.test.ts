import { connect } from "node:net";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, it } from "vitest";
import { eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const SLOW_BACKEND = join(BROKER_DIR, "test/fixtures/malformed-stdio-backend.ts");
const MODERN_META = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {} };

function post(body: unknown, headers: Record<string, string>): string {
  const text = JSON.stringify(body);
  const lines = Object.entries({ host: "127.0.0.1", "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", ...headers, "content-length": String(Buffer.byteLength(text)) });
  return `POST /mcp HTTP/1.1\r\n${lines.map(([name, value]) => `${name}: ${value}`).join("\r\n")}\r\n\r\n${text}`;
}

/** HTTP/1.1 pipelining: a stream queued behind another request on one connection. */
describe("HTTP edge: pipelined requests", () => {
  let running: RunningBroker;

  beforeAll(async () => {
    running = await startBroker({ backends: [{ id: "mal", command: process.execPath, args: ["--import", "tsx", SLOW_BACKEND], cwd: BROKER_DIR, era: "legacy", timeoutMs: 10_000 }], metaTools: false });
  }, 60_000);

  afterAll(async () => {
    await running?.close();
  });

  it("ends a listen stream queued behind a slow request when the client's connection dies: nothing stays held", async () => {
    const url = new URL(running.url);
    const socket = connect(Number(url.port), url.hostname);
    await new Promise<void>((done) => socket.once("connect", done));
    socket.write(post({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "mal__slow", arguments: { ms: 800 }, _meta: MODERN_META } }, { "mcp-method": "tools/call", "mcp-name": "mal__slow" }));
    socket.write(post({ jsonrpc: "2.0", id: 2, method: "subscriptions/listen", params: { notifications: { toolsListChanged: true }, _meta: MODERN_META } }, { "mcp-method": "subscriptions/listen" }));
    await eventually(() => running.broker.sessions.listenCount() === 1, "the pipelined listen opened");
    socket.resetAndDestroy();
    // Its response never had the socket (the slow answer was ahead of it): only the connection's end tells.
    await eventually(() => running.broker.sessions.listenCount() === 0, "the listen stream ended", 5_000);
  });
});
