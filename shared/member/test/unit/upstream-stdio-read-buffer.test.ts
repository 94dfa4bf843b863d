import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import type { Socket } from "node:net";
import { describe, expect, it, vi } from "vitest";
import { batchStdioWrites, installStdioReadBuffer, responseIdOf, StdioReadBuffer } from "../../src/upstream/stdio-read-buffer.js";

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

  it("skips a line over its limit, answers its request with the oversized error, and reads on", () => {
    const heard: unknown[] = [];
    const buffer = new StdioReadBuffer({
      maxLineBytes: 100,
      oversized: ({ bytes }) => ({ code: -32003, message: `${bytes} bytes`, data: { reason: "too-large" } }),
      onOversized: (line) => heard.push(line),
    });
    const big = (id: unknown, order: "sdk" | "jsonrpc-first") => {
      const result = { contents: [{ uri: "x://big", text: "y".repeat(2_000), nested: { id: 99 } }] };
      return order === "sdk" ? { result, jsonrpc: "2.0", id } : { jsonrpc: "2.0", id, result };
    };
    const after = { jsonrpc: "2.0", id: 9, result: {} };
    // Sent in small pieces: the limit is crossed mid-line, and the line ends pieces later.
    const bytes = lines(big(7, "sdk"), big("a\"b", "jsonrpc-first"), { jsonrpc: "2.0", method: "m", params: { pad: "z".repeat(500) }, id: 3 }, after);
    for (let at = 0; at < bytes.length; at += 37) buffer.append(bytes.subarray(at, at + 37));
    expect(buffer.readMessage()).toEqual({ jsonrpc: "2.0", id: 7, error: { code: -32003, message: `${JSON.stringify(big(7, "sdk")).length} bytes`, data: { reason: "too-large" } } });
    expect(buffer.readMessage()).toMatchObject({ id: 'a"b', error: { code: -32003 } });
    // A request from the backend is not a response: skipped, nothing stands in for it.
    expect(buffer.readMessage()).toEqual(after);
    expect(buffer.readMessage()).toBeNull();
    expect(heard).toEqual([
      { bytes: JSON.stringify(big(7, "sdk")).length, answers: 7 },
      { bytes: JSON.stringify(big('a"b', "jsonrpc-first")).length, answers: 'a"b' },
      { bytes: expect.any(Number) },
    ]);
  });

  it("tells a response's id from a skipped line's first and last bytes only when they show it", () => {
    expect(responseIdOf('{"result":{"a":1', '"b"},"jsonrpc":"2.0","id":12}')).toBe(12);
    expect(responseIdOf('{"jsonrpc":"2.0","id":"x","error":{', "}}")).toBe("x");
    expect(responseIdOf('{"id":-4,"jsonrpc":"2.0","result":[', "]}")).toBe(-4);
    // The last member is not the id: the closing braces belong to nested objects.
    expect(responseIdOf('{"jsonrpc":"2.0","result":{"a":', '{"id":5}}}')).toBeUndefined();
    // Not a response: a request or a notification from the backend.
    expect(responseIdOf('{"method":"sampling/createMessage","params":{', '},"jsonrpc":"2.0","id":1}')).toBeUndefined();
    expect(responseIdOf('{"jsonrpc":"2.0","method":"notifications/message","params":{', '"id":3}}')).toBeUndefined();
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
