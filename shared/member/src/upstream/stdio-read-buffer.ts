import { NOTIFICATION } from "@mcp-broker/shared";
import { parseJSONRPCMessage, serializeMessage, STDIO_DEFAULT_MAX_BUFFER_SIZE, type JSONRPCMessage } from "@modelcontextprotocol/client";
import type { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import type { Writable } from "node:stream";

/**
 * The SDK stdio transport's line reader, with one difference: a `notifications/resources/updated`
 * line (the hot path) is handed on as parsed JSON without the SDK's JSON-RPC schema validation,
 * whose failed union branches cost more than the rest of delivering it. Every other line is
 * validated exactly as the SDK does (`parseJSONRPCMessage`); lines that are not JSON are skipped,
 * as the SDK skips them.
 */
export class StdioReadBuffer {
  private buffer: Buffer | undefined;

  constructor(private readonly maxBufferSize = STDIO_DEFAULT_MAX_BUFFER_SIZE) {}

  append(chunk: Buffer): void {
    if ((this.buffer?.length ?? 0) + chunk.length > this.maxBufferSize) {
      this.clear();
      throw new Error(`ReadBuffer exceeded maximum size of ${this.maxBufferSize} bytes`);
    }
    this.buffer = this.buffer === undefined ? chunk : Buffer.concat([this.buffer, chunk]);
  }

  readMessage(): JSONRPCMessage | null {
    while (this.buffer !== undefined) {
      const index = this.buffer.indexOf(10);
      if (index === -1) return null;
      const line = this.buffer.toString("utf8", 0, index).replace(/\r$/, "");
      this.buffer = this.buffer.subarray(index + 1);
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
    this.buffer = undefined;
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
export function installStdioReadBuffer(transport: StdioClientTransport): boolean {
  const target = transport as unknown as { _readBuffer?: { readMessage?: unknown } };
  if (typeof target._readBuffer?.readMessage !== "function") return false;
  target._readBuffer = new StdioReadBuffer();
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
