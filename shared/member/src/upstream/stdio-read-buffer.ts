import { NOTIFICATION } from "@mcp-broker/shared";
import { parseJSONRPCMessage, serializeMessage, STDIO_DEFAULT_MAX_BUFFER_SIZE, type JSONRPCMessage } from "@modelcontextprotocol/client";
import type { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import type { Writable } from "node:stream";

/** What a `StdioReadBuffer` tells of a line it skipped for its size (see `StdioReadBuffer`). */
export interface OversizedLine {
  bytes: number;
  /** The id of the request it answered, when its head and tail show it is a JSON-RPC response. */
  answers?: string | number;
}

/** The first and last bytes of a skipped line kept to tell what it was (see `responseIdOf`). */
const EDGE_BYTES = 512;

/**
 * The SDK stdio transport's line reader, with these differences:
 * - A `notifications/resources/updated` line (the hot path) is handed on as parsed JSON without
 *   the SDK's JSON-RPC schema validation, whose failed union branches cost more than the rest of
 *   delivering it. Every other line is validated exactly as the SDK does (`parseJSONRPCMessage`);
 *   lines that are not JSON are skipped, as the SDK skips them.
 * - A line longer than `maxLineBytes` is skipped, not held: the SDK's reader threw, and its
 *   transport closed, so one oversized answer dropped the backend and every call in flight on it.
 *   When the line is a response, its request gets a -32003 error response in its place (`oversized`
 *   words it) and the backend stays connected; `onOversized` hears of every skipped line.
 * - Lines are split as chunks arrive: the SDK's reader concatenated its whole buffer with each
 *   chunk and searched it from the start, quadratic in the length of a long line.
 */
export class StdioReadBuffer {
  /** Complete lines not read yet, in order (a line skipped for its size, as what is known of it). */
  private readonly lines: (Buffer | OversizedLine)[] = [];
  /** The start of a line still to come. */
  private held: Buffer[] = [];
  private heldBytes = 0;
  /** A line over the limit, being skipped until its end: its length so far, its head, its last bytes. */
  private skipping: { bytes: number; head: Buffer; tail: Buffer } | undefined;

  constructor(
    private readonly options: {
      maxLineBytes?: number;
      /** The error response that stands for an oversized answer to request `id`. */
      oversized?: (line: OversizedLine) => { code: number; message: string; data?: unknown };
      onOversized?: (line: OversizedLine) => void;
    } = {},
  ) {}

  private get maxLineBytes(): number {
    return this.options.maxLineBytes ?? STDIO_DEFAULT_MAX_BUFFER_SIZE;
  }

  append(chunk: Buffer): void {
    let from = 0;
    for (let end = chunk.indexOf(10); end !== -1; end = chunk.indexOf(10, from)) {
      this.take(chunk.subarray(from, end));
      this.endLine();
      from = end + 1;
    }
    if (from < chunk.length) this.take(chunk.subarray(from));
  }

  /** Adds part of the current line: held, or counted once the line is over the limit. */
  private take(part: Buffer): void {
    if (part.length === 0) return;
    if (this.skipping === undefined && this.heldBytes + part.length <= this.maxLineBytes) {
      this.held.push(part);
      this.heldBytes += part.length;
      return;
    }
    if (this.skipping === undefined) {
      const start = Buffer.concat([...this.held, part.subarray(0, EDGE_BYTES)]);
      this.skipping = { bytes: this.heldBytes, head: start.subarray(0, EDGE_BYTES), tail: Buffer.alloc(0) };
      this.held = [];
      this.heldBytes = 0;
    }
    this.skipping.bytes += part.length;
    this.skipping.tail = part.length >= EDGE_BYTES ? Buffer.from(part.subarray(part.length - EDGE_BYTES)) : Buffer.concat([this.skipping.tail, part]).subarray(-EDGE_BYTES);
  }

  private endLine(): void {
    const skipped = this.skipping;
    if (skipped !== undefined) {
      this.skipping = undefined;
      const answers = responseIdOf(skipped.head.toString("utf8"), skipped.tail.toString("utf8"));
      this.lines.push({ bytes: skipped.bytes, ...(answers !== undefined && { answers }) });
      return;
    }
    this.lines.push(this.held.length === 1 ? (this.held[0] as Buffer) : Buffer.concat(this.held, this.heldBytes));
    this.held = [];
    this.heldBytes = 0;
  }

  readMessage(): JSONRPCMessage | null {
    for (let next = this.lines.shift(); next !== undefined; next = this.lines.shift()) {
      if (!Buffer.isBuffer(next)) {
        this.options.onOversized?.(next);
        const error = next.answers === undefined ? undefined : this.options.oversized?.(next);
        if (error !== undefined && next.answers !== undefined) return { jsonrpc: "2.0", id: next.answers, error };
        continue;
      }
      const line = next.toString("utf8").replace(/\r$/, "");
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch {
        continue;
      }
      return isResourceUpdated(value) ? value : parseJSONRPCMessage(value);
    }
    return null;
  }

  clear(): void {
    this.lines.length = 0;
    this.held = [];
    this.heldBytes = 0;
    this.skipping = undefined;
  }
}

/** A JSON-RPC id: a number or a JSON string (its escapes undone by JSON.parse). */
const ID = String.raw`(-?\d+|"(?:[^"\\]|\\.)*")`;
/** A response's head: `{"result"` or `{"error"`, maybe after `"jsonrpc"` and `"id"` (either order). */
const RESPONSE_HEAD = new RegExp(String.raw`^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?(?:"id"\s*:\s*${ID}\s*,\s*)?(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"(?:result|error)"\s*:`);
/** The top-level id as the object's last member: the only `}` after it closes the object. */
const ID_LAST = new RegExp(String.raw`"id"\s*:\s*${ID}\s*\}\s*$`);

/**
 * The id of the request a skipped line answered, from its first and last bytes, when they show it
 * is a JSON-RPC response (its first member is `result` or `error`, after `jsonrpc` and `id` at most)
 * and name its id (among those first members, or as the last member: the order the SDKs write).
 */
export function responseIdOf(head: string, tail: string): string | number | undefined {
  const response = RESPONSE_HEAD.exec(head);
  if (response === null) return undefined;
  return response[1] !== undefined ? parseId(response[1]) : lastMemberId(tail);
}

/** The id of a JSON-RPC message whose serialized text ends with `tail`, when `id` is its last member (the order the SDKs write). */
export function lastMemberId(tail: string): string | number | undefined {
  const id = ID_LAST.exec(tail)?.[1];
  return id === undefined ? undefined : parseId(id);
}

function parseId(id: string): string | number | undefined {
  try {
    const value: unknown = JSON.parse(id);
    return typeof value === "string" || typeof value === "number" ? value : undefined;
  } catch {
    return undefined;
  }
}

function isResourceUpdated(value: unknown): value is JSONRPCMessage {
  const candidate = value as { jsonrpc?: unknown; method?: unknown; id?: unknown; params?: { uri?: unknown } } | null;
  return (
    candidate !== null &&
    typeof candidate === "object" &&
    candidate.jsonrpc === "2.0" &&
    candidate.method === NOTIFICATION.resourceUpdated &&
    candidate.id === undefined &&
    typeof candidate.params?.uri === "string"
  );
}

/**
 * Puts a `StdioReadBuffer` in place of the transport's own reader (a private field of the SDK's
 * StdioClientTransport). Returns false, changing nothing, when the SDK no longer has that field.
 */
export function installStdioReadBuffer(transport: StdioClientTransport, options?: ConstructorParameters<typeof StdioReadBuffer>[0]): boolean {
  const target = transport as unknown as { _readBuffer?: { readMessage?: unknown } };
  if (typeof target._readBuffer?.readMessage !== "function") return false;
  target._readBuffer = new StdioReadBuffer(options);
  return true;
}

/**
 * Makes the transport's writes to the backend's stdin one write per event-loop turn: the stdin is
 * corked at the first message of a turn and uncorked once the turn's I/O callbacks have run
 * (`setImmediate`), so the requests of many concurrent clients (a burst of first subscribers)
 * reach the backend in one pipe write instead of one each (a write was ~9 % of a broker's CPU in
 * bench scenario 5). Order is kept; a message waits at most for the rest of the turn. A message
 * that would take the held turn past the stream's high-water mark first writes what is held (the
 * pipe takes it), so that `write` keeps accepting; one that is refused all the same (the backend
 * is not reading) waits for the stream's one drain, shared by every message refused meanwhile
 * (the SDK's own `send` adds a drain listener per message). The message is serialized as the SDK
 * does it. The stdin is a private field of the SDK's transport, read when a message goes out:
 * without it, the SDK's own `send` runs (and says it is not connected).
 */
export function batchStdioWrites(transport: StdioClientTransport): void {
  const target = transport as unknown as { _process?: { stdin?: Writable | null } };
  const send = transport.send.bind(transport);
  let corked: Writable | undefined;
  let drained: Promise<void> | undefined;
  transport.send = (message: JSONRPCMessage) => {
    const stdin = target._process?.stdin ?? undefined;
    if (stdin === undefined || typeof stdin.cork !== "function") return send(message);
    const json = serializeMessage(message);
    if (corked !== stdin) {
      corked = stdin;
      stdin.cork();
      setImmediate(() => {
        corked = undefined;
        if (!stdin.destroyed) stdin.uncork();
      });
    } else if (stdin.writableLength > 0 && stdin.writableLength + json.length >= stdin.writableHighWaterMark) {
      stdin.uncork();
      stdin.cork();
    }
    if (stdin.write(json)) return Promise.resolve();
    drained ??= new Promise<void>((resolve) =>
      stdin.once("drain", () => {
        drained = undefined;
        resolve();
      }),
    );
    return drained;
  };
}
