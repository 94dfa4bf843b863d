import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, post, startBroker, type RunningBroker } from "../helpers/harness.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const DEMO_BACKEND = join(BROKER_DIR, "src/demo/demo-backend.ts");
const MALFORMED_BACKEND = join(BROKER_DIR, "test/fixtures/malformed-stdio-backend.ts");

interface Readyz {
  status: string;
  backends: { id: string; state: string; lastFailure?: string }[];
}

async function readyz(running: RunningBroker): Promise<{ status: number; body: Readyz }> {
  const response = await fetch(new URL("/readyz", running.url));
  return { status: response.status, body: (await response.json()) as Readyz };
}

async function backendState(running: RunningBroker, id: string): Promise<string | undefined> {
  return (await readyz(running)).body.backends.find((b) => b.id === id)?.state;
}

async function metric(running: RunningBroker, line: string): Promise<boolean> {
  const text = await (await fetch(new URL("/metrics", running.url))).text();
  return text.split("\n").includes(line);
}

/** The demo backend over Streamable HTTP, in a process of its own (so that it can be stopped). */
async function startDemoProcess(cleanup: (() => Promise<void>)[]): Promise<{ child: ChildProcess; url: string }> {
  const filesDir = await mkdtemp(join(tmpdir(), "broker-health-"));
  const child = spawn(process.execPath, ["--import", "tsx", DEMO_BACKEND, "--http", "--port", "0"], {
    cwd: BROKER_DIR,
    env: { ...process.env, DEMO_FILES_DIR: filesDir, LOG_LEVEL: "warn" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  cleanup.push(async () => {
    child.kill("SIGKILL"); // stopped or not
    await rm(filesDir, { recursive: true, force: true });
  });
  const url = await new Promise<string>((done, fail) => {
    let stderr = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
      const ready = /mcp-broker-demo ready: (\S+)/.exec(stderr);
      if (ready?.[1] !== undefined) done(ready[1]);
    });
    child.once("exit", (code) => fail(new Error(`demo backend exited with ${code}: ${stderr}`)));
  });
  return { child, url };
}

const text = (result: unknown): string => ((result as { content: { text: string }[] }).content[0]?.text ?? "");

/**
 * A backend that stops answering while its connection stays up (a stopped or hung process) is
 * `degraded` in /readyz (503) and the metrics after a short health timeout, not after the request
 * timeout; its items stay listed; its next answer makes it ready again. Request timeouts are
 * 60 s here, far beyond the waits below: the health timeout alone must notice.
 */
describe("backend health: a backend that stops answering", () => {
  const cleanup: (() => Promise<void>)[] = [];

  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  it("over HTTP (SIGSTOP): /readyz answers 503 degraded, items stay listed, and 200 again after SIGCONT", async () => {
    const demo = await startDemoProcess(cleanup);
    const running = await startBroker({ backends: [{ id: "demo", url: demo.url, timeoutMs: 60_000, healthIntervalMs: 100, healthTimeoutMs: 1_000 }] });
    cleanup.push(() => running.close());
    const client = await connectClient(running.url, "modern");
    cleanup.push(() => client.close());
    expect((await readyz(running)).status).toBe(200);

    demo.child.kill("SIGSTOP");
    cleanup.push(async () => {
      demo.child.kill("SIGCONT");
    });
    await eventually(async () => (await backendState(running, "demo")) === "degraded", "the stopped backend to be degraded");
    const degraded = await readyz(running);
    expect(degraded.status).toBe(503);
    expect(degraded.body).toMatchObject({ status: "degraded", backends: [{ id: "demo", state: "degraded", lastFailure: "health check got no answer within 1000 ms" }] });
    expect(await metric(running, 'mcp_broker_backend_degraded{backend="demo"} 1')).toBe(true);
    expect(await metric(running, 'mcp_broker_backend_up{backend="demo"} 1')).toBe(true);
    // Still connected: its tools stay listed (the list is the broker's, the backend is not asked).
    expect((await client.listTools()).tools.map((t) => t.name)).toContain("demo__bump_counter");

    demo.child.kill("SIGCONT");
    let ready: Readyz | undefined;
    await eventually(async () => {
      const answer = await readyz(running);
      ready = answer.body;
      return answer.status === 200;
    }, "the backend to be ready again after SIGCONT");
    expect(ready?.backends).toEqual([{ id: "demo", state: "connected", era: "modern", reconnects: 0, watching: true, listed: true }]);
    expect(await metric(running, 'mcp_broker_backend_degraded{backend="demo"} 0')).toBe(true);
    await client.callTool({ name: "demo__bump_counter", arguments: {} });
  });

  it("over stdio (SIGSTOP of the child): degraded, then connected again after SIGCONT, same process", async () => {
    const running = await startBroker({
      backends: [
        { id: "mal", command: process.execPath, args: ["--import", "tsx", MALFORMED_BACKEND], cwd: BROKER_DIR, era: "legacy", timeoutMs: 60_000, healthIntervalMs: 100, healthTimeoutMs: 1_000 },
      ],
    });
    cleanup.push(() => running.close());
    const client = await connectClient(running.url, "legacy");
    cleanup.push(() => client.close());
    const pid = Number(text(await client.callTool({ name: "mal__pid" })));

    process.kill(pid, "SIGSTOP");
    cleanup.push(async () => {
      process.kill(pid, "SIGCONT");
    });
    await eventually(async () => (await backendState(running, "mal")) === "degraded", "the stopped stdio backend to be degraded");
    expect((await readyz(running)).status).toBe(503);

    process.kill(pid, "SIGCONT");
    await eventually(async () => (await readyz(running)).status === 200, "the stdio backend to be ready again after SIGCONT");
    expect(text(await client.callTool({ name: "mal__pid" }))).toBe(String(pid));
  });

  it("after three requests in a row time out, and answers again with the next one", async () => {
    const running = await startBroker({
      // No health probe during the test: only the requests decide. (The timeout bounds the connect too: a child started with tsx needs a moment.)
      backends: [{ id: "mal", command: process.execPath, args: ["--import", "tsx", MALFORMED_BACKEND], cwd: BROKER_DIR, era: "legacy", timeoutMs: 2_000, healthIntervalMs: 600_000 }],
    });
    cleanup.push(() => running.close());
    const client = await connectClient(running.url, "legacy");
    cleanup.push(() => client.close());
    const slow = () => expect(client.callTool({ name: "mal__slow", arguments: { ms: 60_000 } })).rejects.toMatchObject({ code: -32001 });

    await Promise.all([slow(), slow()]);
    // Two may be slow tools: still ready.
    expect((await readyz(running)).status).toBe(200);
    await slow();
    expect(await readyz(running)).toMatchObject({
      status: 503,
      body: { backends: [{ id: "mal", state: "degraded", lastFailure: "3 requests in a row got no answer within 2000 ms" }] },
    });

    await client.callTool({ name: "mal__pid" });
    expect(await readyz(running)).toMatchObject({ status: 200, body: { backends: [{ id: "mal", state: "connected" }] } });
  });

  it("does not count cancelled requests: a client that cancels or drops three calls leaves the backend ready", async () => {
    const dir = await mkdtemp(join(tmpdir(), "broker-cancel-"));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const malLog = join(dir, "mal.log");
    const running = await startBroker({
      backends: [{ id: "mal", command: process.execPath, args: ["--import", "tsx", MALFORMED_BACKEND], cwd: BROKER_DIR, env: { MAL_LOG: malLog }, era: "legacy", timeoutMs: 60_000, healthIntervalMs: 600_000 }],
    });
    cleanup.push(() => running.close());
    const logged = async (line: string) => (await readFile(malLog, "utf8").catch(() => "")).split("\n").filter((l) => l === line).length;

    // Legacy: notifications/cancelled. The broker cancels the backend's request and answers -32800.
    const init = await post(running.url, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "raw", version: "1" } } });
    const session = { "mcp-session-id": init.headers.get("mcp-session-id") ?? "" };
    for (let id = 1; id <= 3; id++) {
      const call = post(running.url, { jsonrpc: "2.0", id, method: "tools/call", params: { name: "mal__slow", arguments: { ms: 60_000 } } }, session);
      await eventually(async () => (await logged("call slow")) === id, "the call to reach the backend");
      await post(running.url, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: id } }, session);
      expect((await call).json).toMatchObject({ id, error: { code: -32800 } });
    }
    expect(await readyz(running)).toMatchObject({ status: 200, body: { backends: [{ id: "mal", state: "connected" }] } });

    // Modern: no session to cancel through; the client closes the request's connection.
    const client = await connectClient(running.url, "modern");
    cleanup.push(() => client.close());
    for (let i = 1; i <= 3; i++) {
      const abort = new AbortController();
      const call = client.callTool({ name: "mal__slow", arguments: { ms: 60_000 } }, { signal: abort.signal });
      await eventually(async () => (await logged("call slow")) === 3 + i, "the call to reach the backend");
      abort.abort();
      await expect(call).rejects.toThrow();
      // The broker cancelled its request to the backend: it has handled the closed connection.
      await eventually(async () => (await logged("cancelled")) === 3 + i, "the broker to cancel the backend's request");
    }
    expect(await readyz(running)).toMatchObject({ status: 200, body: { backends: [{ id: "mal", state: "connected" }] } });
  });
});

/** A request to a legacy HTTP backend that the broker gives up on must not leave its answer open. */
describe("backend requests given up on (legacy HTTP backend)", () => {
  it("ends the answer of each call that timed out or was cancelled: the backend keeps no exchange open for it", async () => {
    const server = createTestServer({ name: "slow-backend" });
    const backend = await startLegacyHttpBackend(server);
    const running = await startBroker({ backends: [{ id: "leg", url: backend.url, era: "legacy", timeoutMs: 300, healthIntervalMs: 600_000 }] });
    try {
      const client = await connectClient(running.url, "legacy");
      const before = backend.openExchanges(); // the standalone stream
      // The backend's tool outlasts the broker's timeout; its SDK server does not answer a cancelled request.
      for (let i = 0; i < 5; i++) await expect(client.callTool({ name: "leg__slow", arguments: { ms: 60_000 } })).rejects.toMatchObject({ code: -32001 });
      // A client's own cancellation (notifications/cancelled), too.
      const abort = new AbortController();
      const calls = backend.requests("tools/call");
      const call = client.callTool({ name: "leg__slow", arguments: { ms: 60_000 } }, { signal: abort.signal, timeout: 60_000 });
      await eventually(() => backend.requests("tools/call") > calls, "the call to reach the backend");
      abort.abort();
      await expect(call).rejects.toThrow();
      await eventually(() => backend.openExchanges() <= before, `the given-up calls' exchanges to end (${backend.openExchanges()} open, ${before} before)`, 5_000);
      // The connection serves on (three timeouts in a row marked it degraded; this answer clears that).
      expect((await client.callTool({ name: "leg__echo", arguments: { text: "still" } })).content).toEqual([{ type: "text", text: "still" }]);
      expect(await readyz(running)).toMatchObject({ status: 200, body: { backends: [{ id: "leg", state: "connected" }] } });
      await client.close();
    } finally {
      await running.close();
      await backend.close();
    }
  }, 60_000);
});

/** A backend URL that answers, but not MCP: `/readyz` says so in one short line, not a schema dump. */
describe("backend health: the last failure of a backend that is not MCP", () => {
  let server: Server;
  let base: string;

  beforeAll(async () => {
    // A JSON API: a status document for anything; JSON-RPC without MCP under /rpc (it echoes the id).
    server = createServer((req, res) => {
      let body = "";
      req.setEncoding("utf8");
      req.on("data", (chunk: string) => (body += chunk));
      req.on("end", () => {
        const answer = req.url === "/rpc" && body !== "" ? { jsonrpc: "2.0", id: (JSON.parse(body) as { id?: unknown }).id ?? null, result: { items: [] } } : { status: "ok", service: "inventory-api", version: "1.2.3" };
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(answer));
      });
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((done) => server.close(done));
  });

  it("is one short line naming what is wrong", async () => {
    const once = { reconnect: { initialDelayMs: 60_000, maxDelayMs: 60_000 } };
    const running = await startBroker(
      {
        backends: [
          { id: "api", url: `${base}/mcp`, ...once },
          { id: "rpc", url: `${base}/rpc`, era: "legacy", ...once },
        ],
      },
      {},
      { readyBackends: [] },
    );
    try {
      let failures: Record<string, string | undefined> = {};
      await eventually(async () => {
        const { body } = await readyz(running);
        failures = Object.fromEntries(body.backends.map((b) => [b.id, b.lastFailure]));
        return failures.api !== undefined && failures.rpc !== undefined;
      }, "both backends to have failed");
      for (const failure of Object.values(failures)) {
        expect(failure?.length).toBeLessThanOrEqual(300);
        expect(failure).not.toContain("\n");
      }
      // Not JSON-RPC at all: the first issue of the message schema's first branch.
      expect(failures.api).toMatch(/^connect failed: .*jsonrpc: .*"2\.0"/);
      // JSON-RPC, but no initialize result: the first missing field, and how many more there are.
      expect(failures.rpc).toMatch(/^connect failed: Invalid result for initialize: protocolVersion: .* \(and 2 more\)$/);
    } finally {
      await running.close();
    }
  });
});
