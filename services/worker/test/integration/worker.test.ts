import { spawn, type ChildProcess } from "node:child_process";
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createRedisEngine } from "@mcp-broker/shared/node";
import { deleteKeys, testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { toNodeHandler } from "@modelcontextprotocol/node";
import { createMcpHandler, McpServer } from "@modelcontextprotocol/server";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";

const WORKER = resolve(import.meta.dirname, "../../src/main.ts");

/** A small Streamable HTTP backend with two tools. */
async function startBackend(): Promise<{ url: string; close(): Promise<void> }> {
  const handler = createMcpHandler(() => {
    const mcp = new McpServer({ name: "worker-test-backend", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
    for (const name of ["alpha", "beta"]) mcp.registerTool(name, { description: `Tool ${name}.` }, async () => ({ content: [{ type: "text", text: name }] }));
    return mcp;
  });
  const node = toNodeHandler(handler);
  const server: Server = createServer((req, res) => void node(req, res));
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: async () => {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}

/** Runs the worker's real entry point; resolves with its output so far, its exit and (once up) its HTTP port. */
function runWorker(args: string[], env: Record<string, string> = {}): { child: ChildProcess; stderr: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ["--import", "tsx", WORKER, ...args], { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
  const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
  return { child, stderr: () => stderr, exited };
}

describe("mcp-broker-worker", () => {
  let redisUrl: string;
  let dir: string;
  const prefixes: string[] = [];

  beforeAll(async () => {
    redisUrl = await testRedisUrl();
    dir = await mkdtemp(join(tmpdir(), "worker-test-"));
  });

  afterAll(async () => {
    for (const prefix of prefixes) await deleteKeys(redisUrl, prefix);
    await rm(dir, { recursive: true, force: true });
  });

  async function configFile(backendUrl: string, extra: Record<string, unknown> = {}): Promise<{ file: string; prefix: string }> {
    const prefix = uniquePrefix("worker");
    prefixes.push(prefix);
    const file = join(dir, `${prefix.replace(/[^a-z0-9]/gi, "_")}.json`);
    await writeFile(file, JSON.stringify({ backends: [{ id: "b", url: backendUrl, era: "modern" }], redis: { keyPrefix: prefix }, logging: { level: "warn" }, ...extra }));
    return { file, prefix };
  }

  it("runs the cluster's jobs and serves /healthz, /readyz and /metrics on its own port", async () => {
    const backend = await startBackend();
    const { file, prefix } = await configFile(backend.url);
    const worker = runWorker(["--config", file, "--port", "0"], { REDIS_URL: redisUrl });
    try {
      await vi.waitFor(() => expect(worker.stderr()).toMatch(/mcp-broker-worker running: .* on http:\/\/127\.0\.0\.1:\d+/), { timeout: 20_000 });
      const base = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(worker.stderr())?.[1] ?? "";
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      // Ready once the backend is connected; the worker watches it and loads its lists into the cluster catalog.
      await vi.waitFor(async () => expect((await fetch(`${base}/readyz`)).status).toBe(200), { timeout: 15_000 });
      expect(await (await fetch(`${base}/readyz`)).json()).toMatchObject({ status: "ready", role: "worker", engine: "redis", backends: [{ id: "b", state: "connected", watching: true }] });
      const engine = createRedisEngine({ url: redisUrl, keyPrefix: prefix, instanceId: "reader", onInvalidMessage: () => undefined, onConnectionError: () => undefined });
      await engine.connect();
      try {
        await vi.waitFor(async () => expect((await engine.catalog.get("b", "tools"))?.items.map((t) => t.name)).toEqual(["alpha", "beta"]), { timeout: 10_000 });
      } finally {
        await engine.close();
      }
      const metrics = await (await fetch(`${base}/metrics`)).text();
      expect(metrics).toMatch(/mcp_broker_job_runs_total\{type="reload",outcome="completed"\} [1-9]/);
      expect(metrics).toMatch(/mcp_broker_list_reloads_total [1-9]/);
      expect(metrics).toMatch(/mcp_broker_jobs\{state="waiting"\} \d+/);
      expect(metrics).toMatch(/mcp_broker_job_duration_seconds_count\{type="reload"\} [1-9]/);
      expect(metrics).toMatch(/mcp_broker_backend_watching\{backend="b"\} 1/);
      // Anything else is not served; /readyz keeps its Host check.
      expect((await fetch(`${base}/mcp`)).status).toBe(404);
      const rebound = await new Promise<number>((done, fail) =>
        request(`${base}/readyz`, { headers: { host: "attacker.example" } }, (res) => {
          res.resume();
          done(res.statusCode ?? 0);
        })
          .on("error", fail)
          .end(),
      );
      expect(rebound).toBe(403);
      worker.child.kill("SIGTERM");
      expect(await worker.exited).toBe(0);
    } finally {
      worker.child.kill("SIGKILL");
      await backend.close();
    }
  });

  it("says starting on /readyz while its backends first connect, not degraded", async () => {
    // Port 9 (discard) refuses: the backend stays down, so the worker is not ready.
    const { file } = await configFile("http://127.0.0.1:9/mcp");
    const worker = runWorker(["--config", file, "--port", "0"], { REDIS_URL: redisUrl });
    try {
      await vi.waitFor(() => expect(worker.stderr()).toMatch(/mcp-broker-worker running: .* on http:\/\/127\.0\.0\.1:\d+/), { timeout: 20_000 });
      const base = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(worker.stderr())?.[1] ?? "";
      const readyz = await fetch(`${base}/readyz`);
      expect(readyz.status).toBe(503);
      expect(await readyz.json()).toMatchObject({ status: "starting", role: "worker", backends: [{ id: "b" }] });
    } finally {
      worker.child.kill("SIGKILL");
    }
  });

  it("exits at once when Redis cannot be reached at start, without waiting for it in its stop", async () => {
    const closed = createServer();
    await new Promise<void>((done) => closed.listen(0, "127.0.0.1", done));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((done) => closed.close(() => done()));
    const { file } = await configFile("http://127.0.0.1:9/mcp");
    const worker = runWorker(["--config", file, "--port", "0"], { REDIS_URL: `redis://127.0.0.1:${port}` });
    expect(await worker.exited).toBe(1);
    expect(worker.stderr()).toContain("cannot be reached");
    // The stop dropped the Redis connections instead of letting each step wait out its timeout (about 11 s).
    expect(worker.stderr()).toContain("Redis does not answer: this instance stops without handing over");
  });

  it("refuses the memory engine, and a port in use, before it joins any cluster", async () => {
    const { file } = await configFile("http://127.0.0.1:9/mcp");
    const memory = runWorker(["--config", file, "--port", "0"], { REDIS_URL: "" });
    expect(await memory.exited).toBe(2);
    expect(memory.stderr()).toContain("no REDIS_URL");

    const taken = createServer();
    await new Promise<void>((done) => taken.listen(0, "127.0.0.1", done));
    const { port } = taken.address() as AddressInfo;
    try {
      const busy = runWorker(["--config", file, "--port", String(port)], { REDIS_URL: redisUrl });
      expect(await busy.exited).toBe(1);
      expect(busy.stderr()).toContain(`cannot listen on 127.0.0.1:${port}`);
    } finally {
      taken.close();
    }
  });
});
