import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import type { Socket } from "node:net";
import { describe, expect, it, vi } from "vitest";
import { batchStdioWrites, installStdioReadBuffer, StdioReadBuffer } from "../../src/upstream/stdio-read-buffer.js";

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

  it("writes the messages of one event-loop turn to the backend's stdin in one write, in order (a test that fails if the SDK renames its process field)", async () => {
    // The child answers each line with a notification naming it.
    const echo = `let rest = ""; process.stdin.on("data", (c) => { const lines = (rest + c).split("\\n"); rest = lines.pop(); for (const l of lines) process.stdout.write(JSON.stringify({ jsonrpc: "2.0", method: "echo", params: { id: JSON.parse(l).id } }) + "\\n"); });`;
    const transport = new StdioClientTransport({ command: process.execPath, args: ["-e", echo] });
    batchStdioWrites(transport);
    const heard: unknown[] = [];
    const all = new Promise<void>((resolve) => {
      transport.onmessage = (message) => {
        heard.push((message as { params?: { id?: unknown } }).params?.id);
        if (heard.length === 50) resolve();
      };
    });
    await transport.start();
    try {
      const stdin = (transport as unknown as { _process: { stdin: Socket } })._process.stdin;
      const writev = vi.spyOn(stdin as unknown as { _writev: (...args: unknown[]) => void }, "_writev");
      const write = vi.spyOn(stdin as unknown as { _write: (...args: unknown[]) => void }, "_write");
      const ids = Array.from({ length: 50 }, (_, i) => i + 1);
      await Promise.all(ids.map((id) => transport.send({ jsonrpc: "2.0", id, method: "ping" })));
      expect(stdin.writableCorked).toBe(1); // held until the turn's I/O is done
      await all;
      expect(heard).toEqual(ids);
      expect(writev).toHaveBeenCalledTimes(1);
      expect(write).not.toHaveBeenCalled();
      expect(stdin.writableCorked).toBe(0);
    } finally {
      await transport.close();
    }
  });

  it("writes a turn's messages past the stream's buffer at once, so sending never waits for a drain per message", async () => {
    const transport = new StdioClientTransport({ command: process.execPath, args: ["-e", 'process.stdin.resume(); process.stdin.on("end", () => process.exit(0));'] });
    batchStdioWrites(transport);
    await transport.start();
    try {
      const stdin = (transport as unknown as { _process: { stdin: Socket } })._process.stdin;
      const params = { uri: `x://${"a".repeat(200)}` };
      // ~250 bytes each: 400 of them are six times the stream's 16 KiB buffer.
      const sent = Array.from({ length: 400 }, (_, id) => transport.send({ jsonrpc: "2.0", id, method: "resources/subscribe", params }));
      expect(stdin.listenerCount("drain")).toBe(0);
      expect(stdin.writableLength).toBeLessThan(stdin.writableHighWaterMark);
      await Promise.all(sent);
    } finally {
      await transport.close();
    }
  });
});
