#!/usr/bin/env node
/**
 * mcp-broker-demo: a stdio MCP server whose resources change on their own, to show subscriptions
 * and list changes through the broker without any setup. Serves both protocol eras
 * (`serveStdio` pins the era the client opens with).
 *
 * - `demo://clock`: the current time, updated every second.
 * - `demo://counter`: a number; `bump_counter {by?}` increments it.
 * - `demo://files/{name}`: one listed resource per file of a folder (env `DEMO_FILES_DIR`, default
 *   a fresh temp folder seeded with `hello.txt`). The folder is watched: a changed file sends
 *   `resources/updated` for its URI, an added or removed one `resources/list_changed`.
 *   `write_file {name, content}` and `delete_file {name}` change it.
 * - `toggle_extra_tool` adds or removes the tool `extra` (`tools/list_changed`).
 * - prompt `summarize {uri}`.
 *
 * With `--http` it serves Streamable HTTP instead (modern era, with the SDK's stateless legacy
 * fallback), so that several brokers of a cluster can share one demo backend.
 *
 * Delivery: a legacy connection gets `resources/updated` only for URIs it subscribed to (and not
 * after unsubscribing); a modern connection gets what its `subscriptions/listen` streams asked
 * for (the SDK's stdio entry filters). Logs go to stderr; the process exits when stdin closes.
 */
import { createHash } from "node:crypto";
import { realpathSync, watch, type FSWatcher } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdir, mkdtemp, readdir, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { parsePort } from "@mcp-broker/shared";
import { toNodeHandler } from "@modelcontextprotocol/node";
import {
  completable,
  createMcpHandler,
  InMemoryServerEventBus,
  McpServer,
  ProtocolError,
  ProtocolErrorCode,
  ResourceNotFoundError,
  ResourceTemplate,
  UriTemplate,
  type CallToolResult,
  type McpServerFactory,
  type ProtocolEra,
  type RegisteredTool,
  type ServerEvent,
} from "@modelcontextprotocol/server";
import { serveStdio } from "@modelcontextprotocol/server/stdio";
import * as z from "zod";
import { BROKER_VERSION, createLogger, type Logger } from "@mcp-broker/member";

export const DEMO_SERVER_NAME = "mcp-broker-demo";
export const CLOCK_URI = "demo://clock";
export const COUNTER_URI = "demo://counter";
export const FILES_TEMPLATE = "demo://files/{name}";

const CLOCK_INTERVAL_MS = 1_000;
/** fs.watch fires several events per write; one rescan per burst. */
const WATCH_DEBOUNCE_MS = 50;
/** Plain names only: no separators, no leading dot, nothing that needs URI encoding. */
const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

const fileUri = (name: string): string => `demo://files/${name}`;

/** Differences between two scans of the folder. */
interface FolderChange {
  readonly added: string[];
  readonly removed: string[];
  readonly changed: string[];
}

/**
 * Watches one folder and reports what changed between scans (by content hash, so a rewrite with
 * identical content is no change). Rescans are serialized: events during a scan give one more.
 */
class FolderWatcher {
  private snapshot = new Map<string, string>();
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private scanning = false;
  private dirty = false;

  constructor(
    readonly dir: string,
    private readonly onChange: (change: FolderChange) => void,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    this.snapshot = await this.scan();
    this.watcher = watch(this.dir, () => this.schedule());
    this.watcher.on("error", (error) => this.log.warn({ err: error }, "folder watch failed"));
  }

  /** File names currently in the folder (a fresh listing, not the last scan). */
  async names(): Promise<string[]> {
    const entries = await readdir(this.dir, { withFileTypes: true });
    return entries
      .filter((entry) => entry.isFile() && FILE_NAME.test(entry.name))
      .map((entry) => entry.name)
      .sort();
  }

  close(): void {
    clearTimeout(this.timer);
    this.watcher?.close();
  }

  private schedule(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.rescan(), WATCH_DEBOUNCE_MS);
  }

  private async rescan(): Promise<void> {
    if (this.scanning) {
      this.dirty = true;
      return;
    }
    this.scanning = true;
    try {
      const next = await this.scan();
      const change = diff(this.snapshot, next);
      this.snapshot = next;
      if (change.added.length + change.removed.length + change.changed.length > 0) this.onChange(change);
    } catch (error) {
      this.log.warn({ err: error }, "folder scan failed");
    } finally {
      this.scanning = false;
      if (this.dirty) {
        this.dirty = false;
        this.schedule();
      }
    }
  }

  private async scan(): Promise<Map<string, string>> {
    const result = new Map<string, string>();
    for (const name of await this.names()) {
      try {
        result.set(name, createHash("sha256").update(await readFile(join(this.dir, name))).digest("hex"));
      } catch {
        // Deleted between listing and reading: it is simply not in this scan.
      }
    }
    return result;
  }
}

function diff(before: ReadonlyMap<string, string>, after: ReadonlyMap<string, string>): FolderChange {
  const added = [...after.keys()].filter((name) => !before.has(name));
  const removed = [...before.keys()].filter((name) => !after.has(name));
  const changed = [...after].filter(([name, hash]) => before.has(name) && before.get(name) !== hash).map(([name]) => name);
  return { added, removed, changed };
}

/**
 * McpServer announces registration changes on its own; the demo announces them from its event
 * stream instead, so a toggle gives exactly one `tools/list_changed` per connection.
 */
class QuietMcpServer extends McpServer {
  override sendToolListChanged(): void {}
  override sendResourceListChanged(): void {}
  override sendPromptListChanged(): void {}
}

/** The state all connections share, and the change events every connection listens to. */
export class DemoBackend {
  counter = 0;
  extraTool = false;
  readonly events = new InMemoryServerEventBus((error) => this.log.error({ err: error }, "event delivery failed"));
  /** One instance per connection (and per discarded `server/discover` probe) under `serveStdio`. */
  readonly factory: McpServerFactory = (ctx) => this.createServer(ctx.era);

  private readonly folder: FolderWatcher;
  private readonly fileTemplate = new UriTemplate(FILES_TEMPLATE);
  private clock: NodeJS.Timeout | undefined;

  constructor(
    readonly filesDir: string,
    private readonly log: Logger,
  ) {
    this.folder = new FolderWatcher(filesDir, (change) => this.onFolderChange(change), log);
  }

  async start(): Promise<void> {
    await this.folder.start();
    this.clock = setInterval(() => this.events.publish({ kind: "resource_updated", uri: CLOCK_URI }), CLOCK_INTERVAL_MS);
  }

  stop(): void {
    clearInterval(this.clock);
    this.folder.close();
  }

  createServer(era: ProtocolEra): McpServer {
    const mcp = new QuietMcpServer(
      { name: DEMO_SERVER_NAME, version: BROKER_VERSION },
      {
        capabilities: {
          resources: { subscribe: true, listChanged: true },
          tools: { listChanged: true },
          prompts: { listChanged: true },
        },
        instructions:
          "Demo backend: demo://clock changes every second, bump_counter changes demo://counter, " +
          "write_file/delete_file change demo://files/*, toggle_extra_tool changes the tool list.",
      },
    );
    const subscriptions = new Set<string>();
    let extra: RegisteredTool | undefined;
    const syncExtraTool = (): void => {
      if (this.extraTool && extra === undefined) extra = this.registerExtraTool(mcp);
      if (!this.extraTool && extra !== undefined) {
        extra.remove();
        extra = undefined;
      }
    };

    this.registerResources(mcp);
    this.registerTools(mcp);
    this.registerPrompts(mcp);
    syncExtraTool();
    if (era === "legacy") {
      mcp.server.setRequestHandler("resources/subscribe", ({ params: { uri } }) => {
        if (!this.isKnownUri(uri)) throw new ResourceNotFoundError(uri);
        subscriptions.add(uri);
        this.log.info({ uri }, "subscribed");
        return {};
      });
      mcp.server.setRequestHandler("resources/unsubscribe", ({ params: { uri } }) => {
        subscriptions.delete(uri);
        this.log.info({ uri }, "unsubscribed");
        return {};
      });
    }

    const deliver = (event: ServerEvent): void => {
      const server = mcp.server;
      let sent: Promise<void> | undefined;
      switch (event.kind) {
        case "resource_updated":
          // Modern: serveStdio's listen router forwards only what a listen stream asked for.
          if (era === "modern" || subscriptions.has(event.uri)) sent = server.sendResourceUpdated({ uri: event.uri });
          break;
        case "resources_list_changed":
          sent = server.sendResourceListChanged();
          break;
        case "tools_list_changed":
          syncExtraTool();
          sent = server.sendToolListChanged();
          break;
        case "prompts_list_changed":
          sent = server.sendPromptListChanged();
          break;
      }
      // Before connect or while closing there is no one to tell.
      sent?.catch(() => undefined);
    };
    const stopEvents = this.events.subscribe(deliver);
    const previousOnClose = mcp.server.onclose;
    mcp.server.onclose = () => {
      stopEvents();
      subscriptions.clear();
      previousOnClose?.();
    };
    return mcp;
  }

  private isKnownUri(uri: string): boolean {
    if (uri === CLOCK_URI || uri === COUNTER_URI) return true;
    const name = this.fileTemplate.match(uri)?.["name"];
    return typeof name === "string" && FILE_NAME.test(name);
  }

  private onFolderChange({ added, removed, changed }: FolderChange): void {
    this.log.info({ added, removed, changed }, "files changed");
    // Added and removed files get an update too: a client may have subscribed to a name before it existed.
    for (const name of [...changed, ...added, ...removed]) this.events.publish({ kind: "resource_updated", uri: fileUri(name) });
    if (added.length + removed.length > 0) this.events.publish({ kind: "resources_list_changed" });
  }

  /** The text of a demo resource, or a not-found error. */
  private async readText(uri: string): Promise<string> {
    if (uri === CLOCK_URI) return new Date().toISOString();
    if (uri === COUNTER_URI) return String(this.counter);
    const name = this.fileTemplate.match(uri)?.["name"];
    if (typeof name !== "string" || !FILE_NAME.test(name)) throw new ResourceNotFoundError(uri);
    try {
      return await readFile(join(this.filesDir, name), "utf8");
    } catch {
      throw new ResourceNotFoundError(uri);
    }
  }

  private async allUris(): Promise<string[]> {
    return [CLOCK_URI, COUNTER_URI, ...(await this.folder.names()).map(fileUri)];
  }

  private registerResources(mcp: McpServer): void {
    mcp.registerResource("clock", CLOCK_URI, { title: "Clock", description: "The current time; changes every second.", mimeType: "text/plain" }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: "text/plain", text: await this.readText(CLOCK_URI) }],
    }));
    mcp.registerResource("counter", COUNTER_URI, { title: "Counter", description: "A number bump_counter increments.", mimeType: "text/plain" }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: "text/plain", text: await this.readText(COUNTER_URI) }],
    }));
    mcp.registerResource(
      "files",
      new ResourceTemplate(FILES_TEMPLATE, {
        list: async () => ({
          resources: (await this.folder.names()).map((name) => ({ uri: fileUri(name), name, mimeType: "text/plain" })),
        }),
        complete: { name: async (value) => (await this.folder.names()).filter((name) => name.startsWith(value)) },
      }),
      { title: "Files", description: `Files in the demo folder ${this.filesDir}.`, mimeType: "text/plain" },
      async (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/plain", text: await this.readText(uri.href) }] }),
    );
  }

  private registerTools(mcp: McpServer): void {
    mcp.registerTool(
      "bump_counter",
      { description: "Adds `by` (default 1) to demo://counter.", inputSchema: z.object({ by: z.number().int().optional() }) },
      ({ by }) => {
        this.counter += by ?? 1;
        this.events.publish({ kind: "resource_updated", uri: COUNTER_URI });
        return textResult(`counter = ${this.counter}`);
      },
    );
    mcp.registerTool(
      "write_file",
      {
        description: "Writes a file to the demo folder: updates demo://files/<name>, and a new file changes the resource list.",
        inputSchema: z.object({ name: z.string().regex(FILE_NAME), content: z.string() }),
      },
      async ({ name, content }) => {
        await writeFile(join(this.filesDir, name), content, "utf8");
        return textResult(`wrote ${fileUri(name)}`);
      },
    );
    mcp.registerTool(
      "delete_file",
      { description: "Deletes a file from the demo folder (the resource list changes).", inputSchema: z.object({ name: z.string().regex(FILE_NAME) }) },
      async ({ name }) => {
        try {
          await unlink(join(this.filesDir, name));
        } catch {
          return { ...textResult(`no file ${name}`), isError: true };
        }
        return textResult(`deleted ${fileUri(name)}`);
      },
    );
    mcp.registerTool("toggle_extra_tool", { description: "Adds or removes the tool `extra` (tools/list_changed)." }, () => {
      this.extraTool = !this.extraTool;
      this.events.publish({ kind: "tools_list_changed" });
      return textResult(this.extraTool ? "extra tool added" : "extra tool removed");
    });
  }

  private registerExtraTool(mcp: McpServer): RegisteredTool {
    return mcp.registerTool("extra", { description: "Exists while toggle_extra_tool has it on." }, () => textResult("extra tool called"));
  }

  private registerPrompts(mcp: McpServer): void {
    mcp.registerPrompt(
      "summarize",
      {
        description: "Asks for a one-sentence summary of a demo resource (embedded in the prompt).",
        argsSchema: z.object({ uri: completable(z.string(), async (value) => (await this.allUris()).filter((uri) => uri.startsWith(value))) }),
      },
      async ({ uri }) => {
        let text: string;
        try {
          text = await this.readText(uri);
        } catch {
          throw new ProtocolError(ProtocolErrorCode.InvalidParams, `Unknown demo resource: ${uri}`, { uri });
        }
        return {
          messages: [
            { role: "user", content: { type: "text", text: `Summarize the resource ${uri} in one sentence.` } },
            { role: "user", content: { type: "resource", resource: { uri, mimeType: "text/plain", text } } },
          ],
        };
      },
    );
  }
}

function textResult(text: string): CallToolResult {
  return { content: [{ type: "text", text }] };
}

/** The folder from `DEMO_FILES_DIR`, or a fresh temp folder seeded with hello.txt (removed on exit). */
async function prepareFilesDir(): Promise<{ dir: string; temporary: boolean }> {
  const configured = process.env.DEMO_FILES_DIR;
  if (configured !== undefined && configured !== "") {
    await mkdir(configured, { recursive: true });
    return { dir: configured, temporary: false };
  }
  const dir = await mkdtemp(join(tmpdir(), "mcp-broker-demo-"));
  await writeFile(join(dir, "hello.txt"), "Hello from the mcp-broker demo backend.\n", "utf8");
  return { dir, temporary: true };
}

const USAGE = `Usage: mcp-broker-demo                      serve one client over stdio
       mcp-broker-demo --http [--port N] [--host H]   serve Streamable HTTP at /mcp (default 127.0.0.1:3100), for many brokers`;

/** Serves the demo over Streamable HTTP (modern era, with the SDK's stateless legacy fallback). */
async function serveHttp(demo: DemoBackend, host: string, port: number, log: Logger): Promise<{ close(): Promise<void> }> {
  const handler = createMcpHandler(demo.factory, { bus: demo.events, onerror: (error) => log.warn({ err: error }, "HTTP serving error") });
  const node = toNodeHandler(handler, { onerror: (error) => log.warn({ err: error }, "HTTP adapter error") });
  const server = createServer((req, res) => {
    if ((req.url ?? "/").split("?")[0] !== "/mcp") {
      res.writeHead(404, { "content-type": "text/plain" }).end("The MCP endpoint is /mcp\n");
      return;
    }
    void node(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address() as AddressInfo;
  log.info({ url: `http://${address.address}:${address.port}/mcp` }, "demo backend serving Streamable HTTP");
  process.stderr.write(`mcp-broker-demo ready: http://${address.address}:${address.port}/mcp\n`);
  return {
    close: async () => {
      await handler.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export async function main(argv: string[] = process.argv.slice(2)): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { http: { type: "boolean", default: false }, port: { type: "string" }, host: { type: "string" }, help: { type: "boolean", short: "h" } }, strict: true });
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const port = parsePort(values.port ?? process.env.PORT ?? "3100");
  if (port === undefined) throw new Error(`--port: '${values.port ?? process.env.PORT}' is not a port number (0-65535).\n${USAGE}`);
  const log = createLogger(process.env.LOG_LEVEL ?? "info", DEMO_SERVER_NAME);
  const { dir, temporary } = await prepareFilesDir();
  const demo = new DemoBackend(dir, log);
  await demo.start();
  const handle = values.http
    ? await serveHttp(demo, values.host ?? process.env.HOST ?? "127.0.0.1", port, log)
    : serveStdio(demo.factory, { onerror: (error) => log.warn({ err: error }, "stdio serving error") });
  if (!values.http) log.info({ filesDir: dir }, "demo backend serving on stdio");

  let stopping = false;
  const shutdown = async (reason: string): Promise<void> => {
    if (stopping) return;
    stopping = true;
    log.info({ reason }, "demo backend stopping");
    demo.stop();
    await handle.close().catch(() => undefined);
    if (temporary) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    // Nothing else holds the event loop; exit explicitly anyway in case stdin stays referenced.
    process.exit(0);
  };
  if (!values.http) {
    process.stdin.once("end", () => void shutdown("stdin closed"));
    process.stdin.once("close", () => void shutdown("stdin closed"));
  }
  process.once("SIGINT", () => void shutdown("SIGINT"));
  process.once("SIGTERM", () => void shutdown("SIGTERM"));
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(realpathSync(entry)).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`${DEMO_SERVER_NAME}: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  });
}
