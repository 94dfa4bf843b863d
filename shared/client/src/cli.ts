#!/usr/bin/env node
/**
 * mcp-broker-client: the BrokerClient from a terminal.
 *
 *   mcp-broker-client ls <url> [--json]                                  tools, prompts, resources and templates
 *   mcp-broker-client watch <url> <uri...> [--read] [--max-attempts n]   every update as a JSON line on stdout
 *
 * Options of both: --era auto|legacy|modern, --header "Name: value" (repeatable), --timeout ms,
 * --help. An option of the other command is a usage error.
 * Status and errors go to stderr; stdout carries only the listing or the JSON lines.
 * Exit codes: see EXIT_CODES.
 */
import { realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { MAX_TIMER_MS } from "@mcp-broker/shared";
import { BrokerClient } from "./broker-client.js";
import { validHeaders } from "./broker-client-options.js";
import { ERAS, type EraOption } from "./connection/connection.js";
import type { Prompt, Resource, ResourceTemplate, Tool } from "./lists/list-catalog.js";

export interface CliIo {
  /** One line of output (stdout). */
  out(line: string): void;
  /** One line of status or error (stderr). */
  err(line: string): void;
  /**
   * Stops the command at any point, connecting included: the client disconnects and the command
   * ends. An abort reason of "SIGINT" or "SIGTERM" gives that signal's exit code; any other
   * reason ends it with 0.
   */
  signal?: AbortSignal;
}

/** Timeout of connecting and of each request: shorter than the SDK's 60 s, for an interactive tool. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** The exit codes of the command line (documented in README.md, "CLI"). */
export const EXIT_CODES = {
  /** ls printed every list; watch was stopped by its caller (not by a signal). */
  ok: 0,
  /**
   * The server cannot be reached, a list failed to load (ls), a URI cannot be watched (unknown to
   * the server, refused, or the server cannot subscribe), a read failed (watch --read), a
   * request timed out, or the client gave up reconnecting (watch --max-attempts).
   */
  failure: 1,
  /** Bad arguments. */
  usage: 2,
  /** 128 + 2: stopped by SIGINT (Ctrl-C). */
  SIGINT: 130,
  /** 128 + 15: stopped by SIGTERM. */
  SIGTERM: 143,
} as const;

/** Printed by --help and on bad arguments; README.md ("CLI") shows the part up to the blank line after the options. */
export const USAGE = `Usage:
  mcp-broker-client ls <url> [--json] [options]
  mcp-broker-client watch <url> <uri...> [--read] [--max-attempts <n>] [options]

Options:
  --era auto|legacy|modern   protocol era (default: auto, negotiated)
  --header "Name: value"     extra HTTP header, e.g. "Authorization: Bearer <key>" (repeatable)
  --timeout <ms>             timeout of connecting and of each request (default: ${DEFAULT_TIMEOUT_MS})
  --json                     ls: one JSON object instead of the listing
  --read                     watch: read each resource, and print its content again after each update
  --max-attempts <n>         watch: give up (exit 1) after n failed reconnect attempts in a row (default: never)
  --help                     this text

watch prints one JSON line per event:
  {"event":"updated","uri":"...","reason":"notification","at":"<ISO time>"}
  {"event":"updated","uri":"...","reason":"resync","at":"..."}       (may have changed while away)
  {"event":"content","uri":"...","contents":[...],"at":"..."}           (with --read)
  {"event":"content","uri":"...","contents":null,"error":"...","at":"..."}  (a read failed)

Exit codes: 0 done, 1 failure (unreachable, timed out, a list or URI refused, gave up
reconnecting), 2 bad arguments, 130 after SIGINT (Ctrl-C), 143 after SIGTERM.`;


/** The options of one command only; the others (era, header, timeout, help) apply to both. */
const COMMAND_OPTIONS = { ls: ["json"], watch: ["read", "max-attempts"] } as const;
type Command = keyof typeof COMMAND_OPTIONS;

/** What a command line asks for. */
type CommandLine = { kind: "help" } | { kind: "usage"; problem: string } | Invocation;

interface Invocation {
  kind: "run";
  command: Command;
  url: string;
  uris: string[];
  era: EraOption;
  headers: Record<string, string>;
  timeoutMs: number;
  json: boolean;
  read: boolean;
  /** Undefined: reconnect for ever. */
  maxAttempts: number | undefined;
}

/** Runs one command line (without the node and script arguments); resolves with the exit code. */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const parsed = parseCommandLine(argv);
  if (parsed.kind === "help") {
    io.out(USAGE);
    return EXIT_CODES.ok;
  }
  if (parsed.kind === "usage") {
    io.err(`mcp-broker-client: ${parsed.problem}\n\n${USAGE}`);
    return EXIT_CODES.usage;
  }
  const { command, url, uris, era, headers, timeoutMs, maxAttempts } = parsed;
  let client: BrokerClient;
  try {
    client = new BrokerClient({
      url,
      era,
      headers,
      requestTimeoutMs: timeoutMs,
      ...(maxAttempts !== undefined && { reconnect: { maxAttempts } }),
      clientInfo: { name: "mcp-broker-client-cli", version: "0.1.0" },
    });
  } catch (error) {
    io.err(`mcp-broker-client: ${message(error)}`);
    return EXIT_CODES.usage;
  }
  const { signal } = io;
  const early = stoppedCode(signal);
  if (early !== undefined) return early;
  // A stop request ends whatever is under way (connecting, subscribing, reading) at once.
  const stop = (): void => void client.disconnect();
  signal?.addEventListener("abort", stop, { once: true });
  try {
    const code = command === "ls" ? await list(client, url, parsed.json, io) : await watch(client, url, uris, parsed.read, io, signal);
    return stoppedCode(signal) ?? code;
  } catch (error) {
    const stopped = stoppedCode(signal);
    if (stopped !== undefined) return stopped;
    io.err(`mcp-broker-client: ${message(error)}`);
    return EXIT_CODES.failure;
  } finally {
    signal?.removeEventListener("abort", stop);
    await client.disconnect();
  }
}

/** Checks a command line; `usage` says what is wrong with it. */
function parseCommandLine(argv: readonly string[]): CommandLine {
  const usage = (problem: string): CommandLine => ({ kind: "usage", problem });
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      tokens: true,
      options: {
        era: { type: "string", default: "auto" },
        header: { type: "string", multiple: true, default: [] },
        timeout: { type: "string", default: String(DEFAULT_TIMEOUT_MS) },
        json: { type: "boolean", default: false },
        read: { type: "boolean", default: false },
        "max-attempts": { type: "string" },
        help: { type: "boolean", default: false },
      },
    });
  } catch (error) {
    return usage(message(error));
  }
  const { values, positionals, tokens } = parsed;
  if (values.help) return { kind: "help" };
  const [command, url, ...uris] = positionals;
  if (command !== "ls" && command !== "watch") return usage(command === undefined ? "no command given" : `unknown command ${JSON.stringify(command)}`);
  const given = new Set(tokens.flatMap((token) => (token.kind === "option" ? [token.name] : [])));
  const other = command === "ls" ? "watch" : "ls";
  const misplaced = COMMAND_OPTIONS[other].find((name) => given.has(name));
  if (misplaced !== undefined) return usage(`--${misplaced} is an option of ${other}, not of ${command}`);
  if (url === undefined) return usage(`${command} needs the server's URL`);
  if (command === "ls" && uris.length > 0) return usage("ls takes one URL, no URIs");
  if (command === "watch" && uris.length === 0) return usage("watch needs at least one resource URI");
  const era = ERAS.find((candidate) => candidate === values.era);
  if (era === undefined) return usage(`--era must be one of ${ERAS.join(", ")}`);
  const headers = parseHeaders(values.header);
  if (headers === undefined) return usage('--header must look like "Name: value" (a header name without spaces, a value without control characters)');
  const timeoutMs = positiveInteger(values.timeout);
  if (timeoutMs === undefined || timeoutMs > MAX_TIMER_MS) return usage(`--timeout must be a whole number of milliseconds > 0 and ≤ ${MAX_TIMER_MS}`);
  const maxAttempts = values["max-attempts"] === undefined ? undefined : positiveInteger(values["max-attempts"]);
  if (values["max-attempts"] !== undefined && maxAttempts === undefined) return usage("--max-attempts must be a whole number > 0");
  return { kind: "run", command, url, uris, era, headers, timeoutMs, json: values.json, read: values.read, maxAttempts };
}

function positiveInteger(text: string): number | undefined {
  const value = Number(text);
  return /^\d+$/.test(text) && Number.isSafeInteger(value) && value > 0 ? value : undefined;
}

/** The exit code of a command stopped through `signal`; undefined while it is not stopped. */
function stoppedCode(signal: AbortSignal | undefined): number | undefined {
  if (signal?.aborted !== true) return undefined;
  const reason: unknown = signal.reason;
  return reason === "SIGINT" || reason === "SIGTERM" ? EXIT_CODES[reason] : EXIT_CODES.ok;
}

async function connect(client: BrokerClient, url: string): Promise<void> {
  try {
    await client.connect();
  } catch (error) {
    throw new Error(`cannot connect to ${url}: ${message(error)}`, { cause: error });
  }
}

async function list(client: BrokerClient, url: string, json: boolean, io: CliIo): Promise<number> {
  // The initial load reports each list through its change event, failures included.
  const failures = new Map<string, unknown>();
  const track = (name: string) => ({ error }: { error?: unknown }) => {
    if (error === undefined) failures.delete(name);
    else failures.set(name, error);
  };
  client.on("toolsChange", track("tools"));
  client.on("promptsChange", track("prompts"));
  client.on("resourcesChange", track("resources"));
  client.on("resourceTemplatesChange", track("resourceTemplates"));
  await connect(client, url);
  // A list that failed to load is left out, not shown empty.
  const lists: { tools?: readonly Tool[]; prompts?: readonly Prompt[]; resources?: readonly Resource[]; resourceTemplates?: readonly ResourceTemplate[] } = {};
  if (!failures.has("tools")) lists.tools = client.getTools();
  if (!failures.has("prompts")) lists.prompts = client.getPrompts();
  if (!failures.has("resources")) lists.resources = client.getResources();
  if (!failures.has("resourceTemplates")) lists.resourceTemplates = client.getResourceTemplates();
  for (const [name, error] of failures) io.err(`mcp-broker-client: cannot list ${name}: ${message(error)}`);
  if (json) {
    io.out(JSON.stringify(lists, null, 2));
  } else {
    io.err(`${client.serverInfo?.name ?? "server"} (${client.era ?? "?"} era)`);
    const section = (title: string, rows: readonly (readonly [string, string | undefined])[] | undefined): void => {
      if (rows === undefined) return;
      io.out(`${title} (${rows.length})`);
      const width = Math.max(0, ...rows.map(([name]) => name.length));
      for (const [name, description] of rows) io.out(`  ${name.padEnd(width)}  ${firstLine(description)}`.trimEnd());
    };
    section("tools", lists.tools?.map((t) => [t.name, t.description]));
    section("prompts", lists.prompts?.map((p) => [p.name, p.description]));
    section("resources", lists.resources?.map((r) => [r.uri, r.title ?? r.description ?? r.name]));
    section("resource templates", lists.resourceTemplates?.map((t) => [t.uriTemplate, t.title ?? t.description ?? t.name]));
  }
  return failures.size === 0 ? EXIT_CODES.ok : EXIT_CODES.failure;
}

async function watch(client: BrokerClient, url: string, uris: readonly string[], read: boolean, io: CliIo, signal: AbortSignal | undefined): Promise<number> {
  const line = (event: Record<string, unknown>): void => io.out(JSON.stringify({ ...event, at: new Date().toISOString() }));
  const contentFailed = (uri: string, error: unknown): void => line({ event: "content", uri, contents: null, error: message(error) });
  // An update comes as resourceUpdated when no new content comes with it (nothing of the URI is
  // cached, or the client's re-read got no answer): with --read it is read here. An update of
  // cached content comes as its re-read content instead (watch caches no template entries, so
  // that is one event), and prints its updated line first all the same.
  client.on("resourceUpdated", ({ uri, reason }) => {
    line({ event: "updated", uri, reason });
    if (read) client.readResource(uri).catch((error: unknown) => contentFailed(uri, error));
  });
  client.on("resourceContentChange", (change) => {
    const { uri, entry } = change;
    if (change.cause === "update") line({ event: "updated", uri, reason: change.reason });
    if (entry !== null) line({ event: "content", uri, contents: entry.content.contents });
    // A failed read of watch's own is printed where it rejects (once, whether an entry was dropped or not).
    else if (change.cause === "update") contentFailed(uri, change.error);
  });
  client.on("connectionChange", ({ state, error, attempt }) => {
    io.err(`mcp-broker-client: ${state}${attempt === undefined ? "" : ` (attempt ${attempt})`}${error === undefined ? "" : `: ${message(error)}`}`);
  });
  client.on("error", ({ operation, error }) => io.err(`mcp-broker-client: ${operation}: ${message(error)}`));

  await connect(client, url);
  for (const uri of uris) {
    try {
      await client.subscribeToResource(uri);
    } catch (error) {
      throw new Error(`cannot watch ${uri}: ${message(error)}`, { cause: error });
    }
  }
  if (read) for (const uri of uris) await client.readResource(uri);
  io.err(`mcp-broker-client: watching ${uris.join(", ")} (${client.era ?? "?"} era); Ctrl-C to stop`);

  // Until asked to stop, or until the client gives up reconnecting.
  return new Promise<number>((resolve) => {
    if (signal?.aborted === true) return resolve(EXIT_CODES.ok);
    signal?.addEventListener("abort", () => resolve(EXIT_CODES.ok), { once: true });
    client.on("connectionChange", ({ state }) => {
      if (state !== "disconnected" || signal?.aborted === true) return;
      io.err("mcp-broker-client: gave up reconnecting");
      resolve(EXIT_CODES.failure);
    });
  });
}

function parseHeaders(raw: readonly string[]): Record<string, string> | undefined {
  const headers: Record<string, string> = {};
  for (const header of raw) {
    const colon = header.indexOf(":");
    if (colon <= 0) return undefined;
    headers[header.slice(0, colon).trim()] = header.slice(colon + 1).trim();
  }
  // A name or value fetch would refuse is a usage error, not a connection failure.
  return validHeaders(headers) ? headers : undefined;
}

function firstLine(text: string | undefined): string {
  return (text ?? "").split("\n")[0] ?? "";
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Resolves once everything written to `stream` so far is handed to the OS. */
function flushed(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => stream.write("", () => resolve()));
}

export async function main(): Promise<void> {
  const stop = new AbortController();
  // Once: a second Ctrl-C ends the process the default way, whatever it is doing.
  for (const name of ["SIGINT", "SIGTERM"] as const) process.once(name, () => stop.abort(name));
  // Whoever read stdout went away (`watch … | head`): stop as on a signal, disconnecting, and exit 0.
  let outGone = false;
  process.stdout.on("error", () => {
    outGone = true;
    stop.abort("stdout closed");
  });
  const code = await runCli(process.argv.slice(2), {
    out: (line) => {
      if (!outGone) process.stdout.write(`${line}\n`);
    },
    err: (line) => process.stderr.write(`${line}\n`),
    signal: stop.signal,
  });
  // Piped output is written asynchronously: exiting before it is flushed would cut it short.
  process.exitCode = code;
  await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  process.exit(code);
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(realpathSync(entry)).href) {
  main().catch((error: unknown) => {
    process.stderr.write(`mcp-broker-client: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  });
}
