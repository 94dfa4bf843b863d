import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli, type CliIo } from "../../src/cli.js";
import { startDemoBroker, tempFilesDir, type DemoBroker } from "../helpers/demo-broker.js";
import { TestBackend } from "../helpers/test-backend.js";

interface Captured {
  out: string[];
  err: string[];
  io: CliIo;
  /** Resolves once `ready()` holds, checked after each line written. */
  until: (ready: () => boolean) => Promise<void>;
  stop: (reason?: string) => void;
}

function capture(): Captured {
  const out: string[] = [];
  const err: string[] = [];
  const controller = new AbortController();
  const waiting: { ready: () => boolean; resolve: () => void }[] = [];
  const wrote = (lines: string[]) => (line: string) => {
    lines.push(line);
    for (const waiter of waiting.filter((w) => w.ready())) {
      waiting.splice(waiting.indexOf(waiter), 1);
      waiter.resolve();
    }
  };
  return {
    out,
    err,
    io: { out: wrote(out), err: wrote(err), signal: controller.signal },
    until: (ready) => (ready() ? Promise.resolve() : new Promise((resolve) => waiting.push({ ready, resolve }))),
    stop: (reason) => controller.abort(reason),
  };
}

/** JSON lines printed so far. */
const events = (out: readonly string[]): Record<string, unknown>[] => out.map((line) => JSON.parse(line) as Record<string, unknown>);
const COUNTER = "demo+demo://counter";

/** `runCli` in this process (the spawned bin is tested in cli-bin.test.ts). */
describe("mcp-broker-client CLI against the broker", () => {
  let running: DemoBroker;
  let files: Awaited<ReturnType<typeof tempFilesDir>>;
  /** A second client that changes things, as another agent would. */
  let other: Client;

  beforeAll(async () => {
    files = await tempFilesDir();
    running = await startDemoBroker(files.dir);
    other = new Client({ name: "cli-test-driver", version: "1.0.0" });
    await other.connect(new StreamableHTTPClientTransport(new URL(running.url)));
  });

  afterAll(async () => {
    await other?.close();
    await running?.close();
    await files?.remove();
  });

  it("ls lists tools, prompts, resources and templates", async () => {
    const { out, io } = capture();
    expect(await runCli(["ls", running.url], io)).toBe(0);
    const text = out.join("\n");
    for (const expected of ["tools (8)", "search_resources", "demo__bump_counter", "prompts (1)", "demo__summarize", "resources (", COUNTER, "resource templates (1)", "demo+demo://files/{name}"]) {
      expect(text).toContain(expected);
    }
  });

  it("ls --json prints one JSON document", async () => {
    const { out, io } = capture();
    expect(await runCli(["ls", running.url, "--json", "--era", "legacy"], io)).toBe(0);
    const lists = JSON.parse(out.join("\n")) as { tools: { name: string }[]; resourceTemplates: unknown[] };
    expect(lists.tools.map((t) => t.name)).toContain("demo__toggle_extra_tool");
    expect(lists.resourceTemplates).toHaveLength(1);
  });

  it.each(["legacy", "modern"] as const)("watch prints every update as a JSON line, and ends with 0 when stopped by its caller (%s)", async (era) => {
    const { out, err, io, until, stop } = capture();
    const run = runCli(["watch", running.url, COUNTER, "--era", era], io);
    await until(() => err.some((line) => line.includes(`watching ${COUNTER}`)));
    expect(err.join("\n")).toContain(`(${era} era)`);
    await other.callTool({ name: "demo__bump_counter" });
    await until(() => out.length > 0);
    stop();
    expect(await run).toBe(0);
    expect(events(out)[0]).toEqual({ event: "updated", uri: COUNTER, reason: "notification", at: expect.any(String) });
  });

  it("watch --read prints the content, then each update with its re-read content", async () => {
    const { out, io, until, stop } = capture();
    const run = runCli(["watch", running.url, COUNTER, "--read"], io);
    await until(() => out.length === 1);
    const initial = Number((events(out)[0]?.contents as { text: string }[])[0]?.text);
    await other.callTool({ name: "demo__bump_counter", arguments: { by: 2 } });
    await until(() => out.length === 3);
    stop("SIGTERM");
    expect(await run).toBe(143);
    expect(events(out).slice(1)).toMatchObject([
      { event: "updated", uri: COUNTER, reason: "notification" },
      { event: "content", uri: COUNTER, contents: [{ text: String(initial + 2) }] },
    ]);
  });

  it("fails with usage on bad arguments, with 1 when the server is unreachable or a URI unknown", async () => {
    const bad = capture();
    expect(await runCli(["watch", running.url], bad.io)).toBe(2);
    expect(bad.err.join("\n")).toContain("Usage:");
    const unreachable = capture();
    expect(await runCli(["ls", "http://127.0.0.1:9/mcp", "--era", "legacy"], unreachable.io)).toBe(1);
    expect(unreachable.err.join("\n")).toContain("cannot connect");
    const unknown = capture();
    expect(await runCli(["watch", running.url, "demo+demo://nope", "--era", "legacy"], unknown.io)).toBe(1);
    expect(unknown.err.join("\n")).toContain("cannot watch demo+demo://nope");
  });

  it("ends with the signal's code when stopped before it connected", async () => {
    const { io, stop } = capture();
    stop("SIGINT");
    expect(await runCli(["ls", running.url], io)).toBe(130);
  });
});

describe("mcp-broker-client CLI timeouts and reconnect limits", () => {
  it("gives up on a server that never answers after --timeout, with 1", async () => {
    const hung = createServer(() => undefined);
    await new Promise<void>((resolve) => hung.listen(0, "127.0.0.1", resolve));
    try {
      const { err, io } = capture();
      const started = Date.now();
      expect(await runCli(["ls", `http://127.0.0.1:${(hung.address() as AddressInfo).port}/mcp`, "--timeout", "300"], io)).toBe(1);
      expect(Date.now() - started).toBeLessThan(5_000);
      expect(err.join("\n")).toMatch(/cannot connect .*timed out/);
    } finally {
      hung.closeAllConnections();
      await new Promise<void>((resolve) => hung.close(() => resolve()));
    }
  });

  // TestBackend over HTTP answers legacy requests statelessly (no resources/subscribe): modern only.
  it("watch --max-attempts gives up reconnecting to a server that is gone, with 1", async () => {
    const backend = new TestBackend();
    backend.texts.set("test://one", "one");
    const served = await backend.serveHttp();
    const { err, io, until } = capture();
    const run = runCli(["watch", served.url, "test://one", "--era", "modern", "--max-attempts", "2", "--timeout", "2000"], io);
    await until(() => err.some((line) => line.includes("watching test://one")));
    await served.close();
    expect(await run).toBe(1);
    const status = err.join("\n");
    expect(status).toContain("reconnecting (attempt 1)");
    expect(status).toContain("gave up reconnecting");
  });
});

// TestBackend over HTTP answers legacy requests statelessly (no resources/subscribe): modern only.
describe("mcp-broker-client watch --read when a watched resource goes away and comes back", () => {
  it("prints each update's updated line and then one content line, the failed reads included", async () => {
    const backend = new TestBackend();
    backend.texts.set("test://one", "one");
    const served = await backend.serveHttp();
    try {
      const { out, io, until, stop } = capture();
      const run = runCli(["watch", served.url, "test://one", "--era", "modern", "--read"], io);
      await until(() => out.length === 1);
      // Cached: the client's re-read is refused, and the entry dropped.
      backend.texts.delete("test://one");
      backend.updated("test://one");
      await until(() => out.length === 3);
      // Nothing cached any more: watch reads it itself, and that read is refused too.
      backend.updated("test://one");
      await until(() => out.length === 5);
      backend.texts.set("test://one", "one again");
      backend.updated("test://one");
      await until(() => out.length === 7);
      stop();
      expect(await run).toBe(0);
      const updated = { event: "updated", uri: "test://one", reason: "notification", at: expect.any(String) };
      const refused = { event: "content", uri: "test://one", contents: null, error: expect.any(String), at: expect.any(String) };
      expect(events(out)).toEqual([
        { event: "content", uri: "test://one", contents: [expect.objectContaining({ text: "one" })], at: expect.any(String) },
        updated,
        refused,
        updated,
        refused,
        updated,
        { event: "content", uri: "test://one", contents: [expect.objectContaining({ text: "one again" })], at: expect.any(String) },
      ]);
    } finally {
      await served.close();
    }
  });
});
