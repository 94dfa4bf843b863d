import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runBin } from "../helpers/bin.js";
import { startDemoBroker, tempFilesDir, type DemoBroker } from "../helpers/demo-broker.js";
import { TestBackend } from "../helpers/test-backend.js";

/** The JSON lines printed so far. */
const events = (lines: readonly string[]): Record<string, unknown>[] => lines.map((line) => JSON.parse(line) as Record<string, unknown>);
const COUNTER = "demo+demo://counter";
const watching = (text: string): boolean => text.includes(`watching ${COUNTER}`);

/**
 * The built command line (`node dist/cli.js`), spawned against a broker in this process, with
 * real signals and real pipes. Build the package before running these.
 */
describe("mcp-broker-client bin (spawned)", () => {
  let running: DemoBroker;
  let files: Awaited<ReturnType<typeof tempFilesDir>>;
  /** A second client that changes things, as another agent would. */
  let other: Client;

  beforeAll(async () => {
    files = await tempFilesDir();
    running = await startDemoBroker(files.dir);
    other = new Client({ name: "cli-bin-test-driver", version: "1.0.0" });
    await other.connect(new StreamableHTTPClientTransport(new URL(running.url)));
  });

  afterAll(async () => {
    await other?.close();
    await running?.close();
    await files?.remove();
  });

  it("ls prints the catalog and exits 0", async () => {
    const run = runBin(["ls", running.url]);
    expect(await run.exited).toBe(0);
    for (const expected of ["tools (8)", "search_resources", "demo__bump_counter", "prompts (1)", "resources (", COUNTER, "resource templates (1)", "demo+demo://files/{name}"]) {
      expect(run.stdout()).toContain(expected);
    }
    expect(run.stderr()).toContain("mcp-broker (modern era)");
  });

  it.each([
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const)("watch prints each update as a JSON line until %s, then exits %i", async (signal, code) => {
    const run = runBin(["watch", running.url, COUNTER]);
    await run.until("stderr", watching);
    await other.callTool({ name: "demo__bump_counter" });
    await run.until("stdout", (text) => text.includes("\n"));
    run.child.kill(signal);
    expect(await run.exited).toBe(code);
    expect(events(run.lines())).toEqual([{ event: "updated", uri: COUNTER, reason: "notification", at: expect.any(String) }]);
  });

  it("watch whose reader goes away (| head) disconnects, ending its session, and exits 0", async () => {
    const open = () => running.broker.sessions.legacySessions().filter((s) => !s.closed).length;
    const before = open(); // the driver's own session
    const run = runBin(["watch", running.url, COUNTER, "--era", "legacy"]);
    await run.until("stderr", watching);
    expect(open()).toBe(before + 1);
    run.child.stdout?.destroy(); // as `head` does once it has its lines: the next write fails with EPIPE
    await other.callTool({ name: "demo__bump_counter" });
    await other.callTool({ name: "demo__bump_counter" });
    expect(await run.exited).toBe(0);
    expect(run.stderr()).not.toContain("Unhandled");
    expect(open()).toBe(before);
  });

  it.each(["legacy", "modern"] as const)("watch --read prints the content, then each update and its re-read content (%s)", async (era) => {
    const run = runBin(["watch", running.url, COUNTER, "--read", "--era", era]);
    await run.until("stderr", watching);
    expect(run.stderr()).toContain(`(${era} era)`);
    const [initial] = events(run.lines());
    expect(initial).toMatchObject({ event: "content", uri: COUNTER });
    const before = Number((initial?.contents as { text: string }[])[0]?.text);
    await other.callTool({ name: "demo__bump_counter", arguments: { by: 2 } });
    await run.until("stdout", () => run.lines().length >= 3);
    run.child.kill("SIGINT");
    expect(await run.exited).toBe(130);
    expect(events(run.lines()).slice(1)).toEqual([
      { event: "updated", uri: COUNTER, reason: "notification", at: expect.any(String) },
      { event: "content", uri: COUNTER, contents: [expect.objectContaining({ text: String(before + 2) })], at: expect.any(String) },
    ]);
  });

  it("watch exits 1, saying why, when the server does not know a URI", async () => {
    const run = runBin(["watch", running.url, "demo+demo://nope"]);
    expect(await run.exited).toBe(1);
    expect(run.stderr()).toContain("cannot watch demo+demo://nope");
    expect(run.stdout()).toBe("");
  });

  describe("against a server that never answers", () => {
    let hung: Server;
    let url: string;
    const requests: (() => void)[] = [];
    beforeAll(async () => {
      hung = createServer(() => {
        for (const arrived of requests.splice(0)) arrived();
      });
      await new Promise<void>((resolve) => hung.listen(0, "127.0.0.1", resolve));
      url = `http://127.0.0.1:${(hung.address() as AddressInfo).port}/mcp`;
    });
    afterAll(async () => {
      hung.closeAllConnections();
      await new Promise<void>((resolve) => hung.close(() => resolve()));
    });

    it.each([
      ["ls", "SIGINT", 130],
      ["watch", "SIGTERM", 143],
    ] as const)("%s ends at once on %s while still connecting", async (command, signal, code) => {
      const arrived = new Promise<void>((resolve) => requests.push(resolve));
      const run = runBin(command === "ls" ? ["ls", url] : ["watch", url, COUNTER]);
      await arrived;
      run.child.kill(signal);
      expect(await run.exited).toBe(code);
    }, 15_000);
  });

  describe("against a test server", () => {
    const backend = new TestBackend("big-catalog");
    let served: Awaited<ReturnType<TestBackend["serveHttp"]>>;
    beforeAll(async () => {
      // About 1 MB of listing: far more than a pipe holds at once.
      for (let i = 0; i < 1_500; i++) backend.tools.set(`tool_${i}`, { name: `tool_${i}`, description: `${i} ${"x".repeat(500)}`, run: () => ({ content: [] }) });
      backend.prompts.set("greet", { description: "Greets" });
      backend.texts.set("test://one", "one");
      served = await backend.serveHttp();
    });
    afterAll(async () => {
      await served?.close();
    });

    it("ls --json writes all of a large listing through a pipe", async () => {
      const run = runBin(["ls", served.url, "--json"]);
      expect(await run.exited).toBe(0);
      expect(run.stdout().length).toBeGreaterThan(500_000);
      const lists = JSON.parse(run.stdout()) as { tools: unknown[]; prompts: unknown[]; resources: unknown[] };
      expect(lists.tools).toHaveLength(1_500);
      expect(lists.prompts).toHaveLength(1);
    });

    it("ls reports a list that failed to load on stderr, leaves it out and exits 1", async () => {
      backend.failing.add("tools/list");
      try {
        const run = runBin(["ls", served.url]);
        expect(await run.exited).toBe(1);
        expect(run.stderr()).toContain("cannot list tools: tools/list fails on purpose");
        expect(run.stdout()).not.toContain("tools (");
        expect(run.stdout()).toContain("prompts (1)");
        expect(run.stdout()).toContain("resources (1)");
        const json = runBin(["ls", served.url, "--json"]);
        expect(await json.exited).toBe(1);
        expect(Object.keys(JSON.parse(json.stdout()) as object)).toEqual(["prompts", "resources", "resourceTemplates"]);
      } finally {
        backend.failing.delete("tools/list");
      }
    });
  });
});
