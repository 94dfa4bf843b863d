import { NOTIFICATION } from "@mcp-broker/shared";
import { parseJSONRPCMessage, STDIO_DEFAULT_MAX_BUFFER_SIZE, type JSONRPCMessage } from "@modelcontextprotocol/client";
import type { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

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
