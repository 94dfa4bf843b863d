import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { describe, expect, it } from "vitest";
import { installStdioReadBuffer, StdioReadBuffer } from "../../src/upstream/stdio-read-buffer.js";

const lines = (...messages: unknown[]) => Buffer.from(messages.map((m) => (typeof m === "string" ? m : JSON.stringify(m))).join("\n") + "\n");

describe("stdio read buffer", () => {
  it("hands on resources/updated as parsed JSON, validates everything else, skips what is not JSON", () => {
    const buffer = new StdioReadBuffer();
    const updated = { jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: "x://a" } };
    const result = { jsonrpc: "2.0", id: 1, result: { tools: [] } };
    buffer.append(lines(updated, "not json", result));
    buffer.append(Buffer.from('{"jsonrpc":"2.0","method":"notifications/tools/list_'));
    expect(buffer.readMessage()).toEqual(updated);
    expect(buffer.readMessage()).toEqual(result);
    expect(buffer.readMessage()).toBeNull(); // the rest of a line is still to come
    buffer.append(Buffer.from('changed"}\n'));
    expect(buffer.readMessage()).toEqual({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });
    // A line that is JSON but not JSON-RPC throws, as the SDK's reader does.
    buffer.append(lines({ hello: "world" }));
    expect(() => buffer.readMessage()).toThrow();
  });

  it("refuses to grow past its limit", () => {
    const buffer = new StdioReadBuffer(10);
    expect(() => buffer.append(Buffer.from("x".repeat(11)))).toThrow(/exceeded maximum size/);
  });

  it("takes the SDK transport's reader's place (a test that fails if the SDK renames it)", () => {
    const transport = new StdioClientTransport({ command: process.execPath });
    expect(installStdioReadBuffer(transport)).toBe(true);
    expect((transport as unknown as { _readBuffer: unknown })._readBuffer).toBeInstanceOf(StdioReadBuffer);
  });
});
