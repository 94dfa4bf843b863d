import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseConfig } from "@mcp-broker/shared";
import { testRedisUrl, uniquePrefix } from "@mcp-broker/shared/testing";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createBroker } from "../../src/broker.js";
import { startModernHttpBackend } from "../fixtures/http-backends.js";
import { configFileEnv } from "../fixtures/cli-env.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually } from "../helpers/harness.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const CLI = join(BROKER_DIR, "src/cli.ts");

/** The CLI's environment without the variables that would override the config file. */
/** The broker binds its port before anything else: a port it cannot have fails before any backend starts. */
describe("startup: the port first", () => {
  const cleanup: (() => Promise<void>)[] = [];

  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  /** A config whose one stdio backend, when spawned, leaves `marker` behind (and exits: it is never connected). */
  async function markerConfig(extra: Record<string, unknown> = {}): Promise<{ configFile: string; marker: string }> {
    const dir = await mkdtemp(join(tmpdir(), "broker-startup-"));
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const marker = join(dir, "backend-was-spawned");
    const configFile = join(dir, "broker.json");
    const backend = { id: "b", command: process.execPath, args: ["-e", `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "")`] };
    await writeFile(configFile, JSON.stringify({ backends: [backend], logging: { level: "warn" }, ...extra }));
    return { configFile, marker };
  }

  function runCli(configFile: string, port: number): { exited: Promise<number | null>; stderr: () => string; kill: () => void } {
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "--config", configFile, "--port", String(port)], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
    cleanup.push(async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    });
    return { exited, stderr: () => stderr, kill: () => child.kill("SIGTERM") };
  }

  it("the CLI on a port in use exits 1 saying so, without spawning a backend", async () => {
    const occupant: Server = createServer();
    await new Promise<void>((done) => occupant.listen(0, "127.0.0.1", done));
    cleanup.push(() => new Promise((done) => occupant.close(() => done())));
    const port = (occupant.address() as { port: number }).port;
    const { configFile, marker } = await markerConfig();

    const cli = runCli(configFile, port);
    expect(await cli.exited).toBe(1);
    expect(existsSync(marker)).toBe(false);
    expect(cli.stderr()).toContain(`mcp-broker: cannot listen on 127.0.0.1:${port}: the port is in use`);

    // On the Redis engine too, and without blaming Redis, which it never reached.
    const onRedis = await markerConfig({ redisUrl: await testRedisUrl(), redis: { keyPrefix: uniquePrefix("startup") } });
    const clustered = runCli(onRedis.configFile, port);
    expect(await clustered.exited).toBe(1);
    expect(clustered.stderr()).toContain(`mcp-broker: cannot listen on 127.0.0.1:${port}: the port is in use`);
    expect(clustered.stderr()).not.toContain("Redis does not answer");
  });

  it("spawns that backend on a free port (so the marker does tell)", async () => {
    const { configFile, marker } = await markerConfig();
    const cli = runCli(configFile, 0);
    await eventually(() => existsSync(marker), "the backend to be spawned");
    cli.kill();
    expect(await cli.exited).toBe(0);
  });

  it("holds /mcp requests that arrive before the broker serves, and answers them with the full lists", async () => {
    const backend = await startModernHttpBackend(createTestServer({ name: "early" }));
    cleanup.push(() => backend.close());
    const broker = createBroker(parseConfig({ backends: [{ id: "t", url: backend.url }], server: { port: 0 } }, "test config"), {
      logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }),
    });
    cleanup.push(() => broker.close());
    const url = await broker.bind();

    expect((await fetch(new URL("/healthz", url))).status).toBe(200);
    const starting = await fetch(new URL("/readyz", url));
    expect(starting.status).toBe(503);
    expect(await starting.json()).toMatchObject({ status: "starting", backends: [{ id: "t", state: "connecting" }] });
    // A client that connects and lists at once, before any backend is even started.
    const early = connectClient(url, "legacy").then(async (client) => {
      cleanup.push(() => client.close());
      return (await client.listTools()).tools.map((t) => t.name);
    });

    await broker.startBackends();
    expect(await broker.whenReady()).toBe(true);
    broker.serve();
    expect(await early).toContain("t__echo");
    expect((await fetch(new URL("/readyz", url))).status).toBe(200);
  });

  it("does not wait at its stop for a request held while it started whose client left meanwhile", async () => {
    const backend = await startModernHttpBackend(createTestServer({ name: "early" }));
    cleanup.push(() => backend.close());
    // A stop that waited for it would wait out drainMs, past this test's timeout.
    const broker = createBroker(parseConfig({ backends: [{ id: "t", url: backend.url }], server: { port: 0, drainMs: 60_000 } }, "test config"), {
      logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }),
    });
    const url = new URL(await broker.bind());
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "gone", version: "1" } } });
    const headers = { "content-type": "application/json", accept: "application/json, text/event-stream", "content-length": Buffer.byteLength(body) };
    const gone = await Promise.all(
      [0, 1, 2].map(async () => {
        const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers });
        req.on("error", () => undefined);
        await new Promise<void>((done) => req.end(body, done));
        return req;
      }),
    );
    // A round trip after the requests were sent: the broker has read them (they are held).
    expect((await fetch(new URL("/healthz", url))).status).toBe(200);
    for (const req of gone) req.destroy();
    // The broker sees them go before it serves (clients that gave up on a slow start).
    await new Promise((resolve) => setTimeout(resolve, 300));
    await broker.startBackends();
    expect(await broker.whenReady()).toBe(true);
    broker.serve();
    // The held requests go on now, and find their clients gone.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await broker.close();
  }, 20_000);

  it("with server.whileStarting refuse, answers /mcp at once with 503, Retry-After and -32005 until it serves, then serves", async () => {
    const backend = await startModernHttpBackend(createTestServer({ name: "early" }));
    cleanup.push(() => backend.close());
    const broker = createBroker(parseConfig({ backends: [{ id: "t", url: backend.url }], server: { port: 0, whileStarting: "refuse" } }, "test config"), {
      logger: pino({ level: process.env.TEST_LOG_LEVEL ?? "silent" }),
    });
    cleanup.push(() => broker.close());
    const url = await broker.bind();
    const initialize = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "early", version: "1" } } };
    const post = () =>
      fetch(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream" }, body: JSON.stringify(initialize) });

    const refused = await post();
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await refused.json()).toMatchObject({ jsonrpc: "2.0", id: null, error: { code: -32005, message: expect.stringContaining("starting") } });
    const stream = await fetch(url, { headers: { accept: "text/event-stream", "mcp-session-id": "any" } });
    expect(stream.status).toBe(503);
    await stream.body?.cancel();

    await broker.startBackends();
    expect(await broker.whenReady()).toBe(true);
    broker.serve();
    const served = await post();
    expect(served.status).toBe(200);
    await served.body?.cancel();
  });
});
