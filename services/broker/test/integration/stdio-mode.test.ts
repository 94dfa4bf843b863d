import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { Client, type ClientCapabilities } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectUpdates, eventually } from "../helpers/harness.js";
import { configFileEnv } from "../fixtures/cli-env.js";

const BROKER_DIR = resolve(import.meta.dirname, "../..");
const CLI = join(BROKER_DIR, "src/cli.ts");
const STDIO_BACKEND = join(BROKER_DIR, "test/fixtures/stdio-backend.ts");

/** `mcp-broker --stdio`: one local client over stdin/stdout, in either era. */
describe("stdio mode", () => {
  let dir: string;
  let configFile: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "broker-stdio-"));
    configFile = join(dir, "broker.json");
    await writeFile(
      configFile,
      JSON.stringify({
        backends: [{ id: "t", command: process.execPath, args: ["--import", "tsx", STDIO_BACKEND], cwd: BROKER_DIR, env: { TEST_SERVER_INTERACTIVE: "1" } }],
        logging: { level: "warn" },
        server: { maxBodyBytes: 200_000 },
      }),
    );
  });

  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function connect(era: "legacy" | "modern", capabilities: ClientCapabilities = {}): Promise<Client> {
    const client = new Client({ name: `stdio-${era}`, version: "1.0.0" }, { capabilities, versionNegotiation: { mode: era === "modern" ? { pin: "2026-07-28" } : "legacy" } });
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ["--import", "tsx", CLI, "--stdio", "--config", configFile],
      cwd: BROKER_DIR,
      stderr: "pipe",
    });
    transport.stderr?.on("data", () => undefined); // drained, so the child never blocks on a full pipe
    await client.connect(transport);
    expect(client.getProtocolEra()).toBe(era);
    return client;
  }

  it("passes a backend's question during a legacy client's call to that client, on stdout, and its answer back", async () => {
    const client = await connect("legacy", { elicitation: {} });
    try {
      client.setRequestHandler("elicitation/create", async (request) => ({ action: "accept", content: { ok: request.params.message === "go?" } }));
      const result = await client.callTool({ name: "t__confirm", arguments: { question: "go?" } });
      expect((result.content as { text: string }[])[0]?.text).toMatch(/^confirmed: accept \{"ok":true\}/);
    } finally {
      await client.close();
    }
  });

  it("serves a legacy client: namespaced tools, subscribe, updates on stdout", async () => {
    const client = await connect("legacy");
    try {
      // In stdio mode the broker waits for its backends before it reads the first message.
      expect((await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate)).toContain("t+test://items/{id}");
      const updates = collectUpdates(client);
      await client.subscribeResource({ uri: "t+test://items/5" });
      await client.callTool({ name: "t__emit_update", arguments: { uri: "test://items/6" } });
      await client.callTool({ name: "t__emit_update", arguments: { uri: "test://items/5" } });
      await eventually(() => updates.length === 1, "the subscribed update");
      expect(updates).toEqual(["t+test://items/5"]);
      // (the SDK client normalises -32002 to its ResourceNotFoundError)
      await expect(client.subscribeResource({ uri: "t+nope://x" })).rejects.toMatchObject({ data: { uri: "t+nope://x" } });
    } finally {
      await client.close();
    }
  });

  it("serves a modern client: listen stream acknowledged and tagged with its subscription id", async () => {
    const client = await connect("modern");
    try {
      const ids: unknown[] = [];
      const updates: string[] = [];
      client.setNotificationHandler("notifications/resources/updated", (n) => {
        updates.push(n.params.uri);
        ids.push(n.params._meta?.["io.modelcontextprotocol/subscriptionId"]);
      });
      const listen = await client.listen({ resourceSubscriptions: ["t+test://items/9"] });
      expect(listen.honoredFilter?.resourceSubscriptions).toEqual(["t+test://items/9"]);
      await client.callTool({ name: "t__emit_update", arguments: { uri: "test://items/9" } });
      await eventually(() => updates.length === 1, "the listened update");
      expect(updates).toEqual(["t+test://items/9"]);
      expect(ids).toEqual([expect.stringMatching(/.+/)]);
      await listen.close();
    } finally {
      await client.close();
    }
  });

  it("keeps multi-byte characters intact across pipe chunks", async () => {
    const client = await connect("legacy");
    try {
      const text = "é€😀".repeat(15_000); // ~105 KB of UTF-8: several 64 KiB chunks, split mid-character
      expect((await client.callTool({ name: "t__echo", arguments: { text } })).content).toEqual([{ type: "text", text }]);
    } finally {
      await client.close();
    }
  });

  it("answers bad lines with JSON-RPC errors and exits 0 when stdin closes", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", CLI, "--stdio", "--config", configFile], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["pipe", "pipe", "ignore"] });
    const lines = createInterface({ input: child.stdout });
    const received: unknown[] = [];
    lines.on("line", (line) => received.push(JSON.parse(line)));
    child.stdin.write("{not json\n");
    child.stdin.write("[1,2]\n");
    child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: 7, method: "tools/list" })}\n`);
    // Over server.maxBodyBytes, in pieces: one error, and the rest of that line is skipped.
    child.stdin.write(`{"jsonrpc":"2.0","id":8,"method":"ping","params":{"pad":"${"x".repeat(150_000)}`);
    child.stdin.write(`${"x".repeat(150_000)}"}}\n`);
    child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: 9, method: "ping" })}\n`);
    child.stdin.write(`{"jsonrpc":"2.0","id":10,"method":"ping","params":{"a":${"[".repeat(5_000)}${"]".repeat(5_000)}}}\n`);
    const future = { "io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {} };
    child.stdin.write(`${JSON.stringify({ jsonrpc: "2.0", id: 11, method: "tools/list", params: { _meta: future } })}\n`);
    await eventually(() => received.length === 7, "seven answers");
    expect(received).toEqual([
      expect.objectContaining({ id: null, error: expect.objectContaining({ code: -32700 }) }),
      expect.objectContaining({ id: null, error: expect.objectContaining({ code: -32600 }) }),
      expect.objectContaining({ id: 7, error: expect.objectContaining({ code: -32600 }) }),
      expect.objectContaining({ id: 8, error: expect.objectContaining({ code: -32600, message: expect.stringContaining("too large") }) }),
      expect.objectContaining({ id: 9, error: expect.objectContaining({ message: expect.stringContaining("initialize first") }) }),
      expect.objectContaining({ id: 10, error: expect.objectContaining({ code: -32600, message: expect.stringContaining("deeper than 100") }) }),
      expect.objectContaining({ id: 11, error: expect.objectContaining({ message: expect.stringContaining("2099-01-01") }) }),
    ]);
    const exited = new Promise<number | null>((done) => child.once("exit", (code) => done(code)));
    child.stdin.end();
    expect(await exited).toBe(0);
  });

  it("refuses a --port that is not a port number, naming the flag, before starting anything", async () => {
    for (const port of ["abc", "", "70000"]) {
      const child = spawn(process.execPath, ["--import", "tsx", CLI, "--config", configFile, "--port", port], { cwd: BROKER_DIR, env: configFileEnv(), stdio: ["ignore", "ignore", "pipe"] });
      let stderr = "";
      child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
      const code = await new Promise<number | null>((done) => child.once("exit", (c) => done(c)));
      expect(code).toBe(2);
      expect(stderr).toContain(`--port: '${port}' is not a port number`);
    }
  });
});
