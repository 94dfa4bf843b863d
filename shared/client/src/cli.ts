#!/usr/bin/env node
/**
 * mcp-broker-client: the BrokerClient from a terminal.
 *
 *   mcp-broker-client ls <url> [--json]                 tools, prompts, resources and templates
 *   mcp-broker-client watch <url> <uri...> [--read]     every update as a JSON line on stdout
 *
 * Options: --era auto|legacy|modern, --header "Name: value" (repeatable), --help.
 * Status and errors go to stderr; stdout carries only the listing or the JSON lines.
 */
import { realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { BrokerClient } from "./broker-client.js";
import type { EraOption } from "./connection/connection.js";

export interface CliIo {
  /** One line of output (stdout). */
  out(line: string): void;
  /** One line of status or error (stderr). */
  err(line: string): void;
  /** Ends `watch`. */
  signal?: AbortSignal;
}

const USAGE = `Usage:
  mcp-broker-client ls <url> [--json]
  mcp-broker-client watch <url> <uri...> [--read]

Options:
  --era auto|legacy|modern   protocol era (default: auto, negotiated)
  --header "Name: value"     extra HTTP header, e.g. "Authorization: Bearer <key>" (repeatable)
  --json                     ls: one JSON object instead of the listing
  --read                     watch: read each resource, and print its content again after each update
  --help                     this text

watch prints one JSON line per event:
  {"event":"updated","uri":"...","at":"<ISO time>"}
  {"event":"content","uri":"...","contents":[...],"at":"<ISO time>"}            (with --read)
  {"event":"content","uri":"...","contents":null,"error":"...","at":"..."}     (a re-read failed)`;

const ERAS: readonly EraOption[] = ["auto", "legacy", "modern"];

/** Runs one command line (without the node and script arguments); resolves with the exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        era: { type: "string", default: "auto" },
        header: { type: "string", multiple: true, default: [] },
        json: { type: "boolean", default: false },
        read: { type: "boolean", default: false },
        help: { type: "boolean", default: false },
      },
    });
  } catch (error) {
    io.err(`${message(error)}\n\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  const [command, url, ...uris] = positionals;
  if (values.help) {
    io.out(USAGE);
    return 0;
  }
  const era = ERAS.find((candidate) => candidate === values.era);
  const headers = parseHeaders(values.header);
  if (url === undefined || era === undefined || headers === undefined || !["ls", "watch"].includes(command ?? "") || (command === "watch" && uris.length === 0)) {
    io.err(USAGE);
    return 2;
  }
  let client: BrokerClient;
  try {
    client = new BrokerClient({ url, era, headers, clientInfo: { name: "mcp-broker-client-cli", version: "0.1.0" } });
  } catch (error) {
    io.err(`mcp-broker-client: ${message(error)}`);
    return 2;
  }
  try {
    await client.connect();
  } catch (error) {
    io.err(`mcp-broker-client: cannot connect to ${url}: ${message(error)}`);
    return 1;
  }
  try {
    return command === "ls" ? list(client, values.json, io) : await watch(client, uris, values.read, io);
  } catch (error) {
    io.err(`mcp-broker-client: ${message(error)}`);
    return 1;
  } finally {
    await client.disconnect();
  }
}

function list(client: BrokerClient, json: boolean, io: CliIo): number {
  const lists = {
    tools: client.getTools(),
    prompts: client.getPrompts(),
    resources: client.getResources(),
    resourceTemplates: client.getResourceTemplates(),
  };
  if (json) {
    io.out(JSON.stringify(lists, null, 2));
    return 0;
  }
  io.err(`${client.serverInfo?.name ?? "server"} (${client.era ?? "?"} era)`);
  const section = (title: string, rows: readonly (readonly [string, string | undefined])[]): void => {
    io.out(`${title} (${rows.length})`);
    const width = Math.max(0, ...rows.map(([name]) => name.length));
    for (const [name, description] of rows) io.out(`  ${name.padEnd(width)}  ${firstLine(description)}`.trimEnd());
  };
  section("tools", lists.tools.map((t) => [t.name, t.description]));
  section("prompts", lists.prompts.map((p) => [p.name, p.description]));
  section("resources", lists.resources.map((r) => [r.uri, r.title ?? r.description ?? r.name]));
  section("resource templates", lists.resourceTemplates.map((t) => [t.uriTemplate, t.title ?? t.description ?? t.name]));
  return 0;
}

async function watch(client: BrokerClient, uris: readonly string[], read: boolean, io: CliIo): Promise<number> {
  const line = (event: Record<string, unknown>): void => io.out(JSON.stringify({ ...event, at: new Date().toISOString() }));
  client.on("resourceUpdated", ({ uri }) => {
    if (!read) return line({ event: "updated", uri });
    // Not cached (any more): read it, which prints it through resourceContentChange.
    client.readResource(uri).catch((error: unknown) => line({ event: "content", uri, contents: null, error: message(error) }));
  });
  client.on("resourceContentChange", ({ uri, entry, error }) => {
    if (entry === null) line({ event: "content", uri, contents: null, error: message(error) });
    else line({ event: "content", uri, contents: entry.content.contents });
  });
  client.on("connectionChange", ({ state, error, attempt }) => {
    io.err(`mcp-broker-client: ${state}${attempt === undefined ? "" : ` (attempt ${attempt})`}${error === undefined ? "" : `: ${message(error)}`}`);
  });
  client.on("error", ({ operation, error }) => io.err(`mcp-broker-client: ${operation}: ${message(error)}`));

  for (const uri of uris) await client.subscribeToResource(uri);
  if (read) for (const uri of uris) await client.readResource(uri);
  io.err(`mcp-broker-client: watching ${uris.join(", ")} (${client.era ?? "?"} era); Ctrl-C to stop`);

  // Until asked to stop, or until the client gives up reconnecting.
  const outcome = await new Promise<number>((resolve) => {
    if (io.signal?.aborted === true) return resolve(0);
    io.signal?.addEventListener("abort", () => resolve(0), { once: true });
    client.on("connectionChange", ({ state }) => {
      if (state === "disconnected") resolve(1);
    });
  });
  return outcome;
}

function parseHeaders(raw: readonly string[]): Record<string, string> | undefined {
  const headers: Record<string, string> = {};
  for (const header of raw) {
    const colon = header.indexOf(":");
    if (colon <= 0) return undefined;
    headers[header.slice(0, colon).trim()] = header.slice(colon + 1).trim();
  }
  return headers;
}

function firstLine(text: string | undefined): string {
  return (text ?? "").split("\n")[0] ?? "";
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

async function main(): Promise<void> {
  const stop = new AbortController();
  for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => stop.abort());
  const code = await runCli(process.argv.slice(2), {
    out: (line) => process.stdout.write(`${line}\n`),
    err: (line) => process.stderr.write(`${line}\n`),
    signal: stop.signal,
  });
  process.exit(code);
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(realpathSync(entry)).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`mcp-broker-client: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
