import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../src/cli.js";
import { startDemoBroker, tempFilesDir, type DemoBroker } from "../helpers/demo-broker.js";
import { eventually } from "../helpers/events.js";

interface Captured {
  out: string[];
  err: string[];
  io: { out(line: string): void; err(line: string): void; signal: AbortSignal };
  stop: () => void;
}

function capture(): Captured {
  const out: string[] = [];
  const err: string[] = [];
  const controller = new AbortController();
  return { out, err, io: { out: (l) => out.push(l), err: (l) => err.push(l), signal: controller.signal }, stop: () => controller.abort() };
}

/** JSON lines printed so far. */
const events = (out: readonly string[]): Record<string, unknown>[] => out.map((line) => JSON.parse(line) as Record<string, unknown>);

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
    for (const expected of ["tools (4)", "demo__bump_counter", "prompts (1)", "demo__summarize", "resources (", "demo+demo://counter", "resource templates (1)", "demo+demo://files/{name}"]) {
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

  it.each(["legacy", "modern"] as const)("watch prints every update as a JSON line (%s)", async (era) => {
    const { out, err, io, stop } = capture();
    const run = runCli(["watch", running.url, "demo+demo://counter", "--era", era], io);
    await eventually(() => err.some((line) => line.includes("watching demo+demo://counter")), "the subscription");
    expect(err.join("\n")).toContain(`(${era} era)`);
    await other.callTool({ name: "demo__bump_counter" });
    await eventually(() => out.length > 0, "an update line");
    stop();
    expect(await run).toBe(0);
    expect(events(out)[0]).toMatchObject({ event: "updated", uri: "demo+demo://counter", at: expect.any(String) });
  });

  it("watch --read prints the content, and the re-read content after each update", async () => {
    const { out, io, stop } = capture();
    const run = runCli(["watch", running.url, "demo+demo://counter", "--read"], io);
    await eventually(() => out.length === 1, "the initial content");
    const initial = Number((events(out)[0]?.contents as { text: string }[])[0]?.text);
    await other.callTool({ name: "demo__bump_counter", arguments: { by: 2 } });
    await eventually(() => out.length === 2, "the re-read content");
    stop();
    expect(await run).toBe(0);
    expect(events(out)[1]).toMatchObject({ event: "content", uri: "demo+demo://counter", contents: [{ text: String(initial + 2) }] });
  });

  it("fails with usage on bad arguments, and with 1 when the server is unreachable", async () => {
    const bad = capture();
    expect(await runCli(["watch", running.url], bad.io)).toBe(2);
    expect(bad.err.join("\n")).toContain("Usage:");
    const unreachable = capture();
    expect(await runCli(["ls", "http://127.0.0.1:9/mcp", "--era", "legacy"], unreachable.io)).toBe(1);
    expect(unreachable.err.join("\n")).toContain("cannot connect");
  });
});
