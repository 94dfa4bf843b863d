import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { SseStream } from "../../src/http/sse-stream.js";
import { httpChunk } from "../../src/fanout/sse-event.js";

const frame = (n: number): Buffer => Buffer.from(`id: ${n}\nevent: message\ndata: {"n":${n}}\n\n`);

/** A server whose handler gets every request; closed after each test. */
let server: Server | undefined;
async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<number> {
  server = createServer(handler);
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return (server.address() as AddressInfo).port;
}

/** Sends `request` raw on one connection; resolves with everything read once `until` matches it. */
function exchange(port: number, request: string, until: (text: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(request));
    let text = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`timed out; read so far:\n${text}`));
    }, 5_000);
    socket.on("data", (data: Buffer) => {
      text += data.toString("latin1");
      if (!until(text)) return;
      clearTimeout(timer);
      socket.destroy();
      resolve(text);
    });
    socket.on("error", reject);
  });
}

/** The body of a chunked HTTP/1.1 response (after its header block), de-chunked; throws on a malformed chunk. */
function dechunk(body: string): string {
  let out = "";
  let at = 0;
  for (;;) {
    const lineEnd = body.indexOf("\r\n", at);
    if (lineEnd < 0) return out;
    const size = Number.parseInt(body.slice(at, lineEnd), 16);
    if (Number.isNaN(size)) throw new Error(`bad chunk size at ${at}: ${JSON.stringify(body.slice(at, at + 20))}`);
    if (size === 0) return out;
    const data = body.slice(lineEnd + 2, lineEnd + 2 + size);
    if (data.length < size) return out;
    if (body.slice(lineEnd + 2 + size, lineEnd + 4 + size) !== "\r\n") throw new Error(`chunk at ${at} does not end with CRLF`);
    out += data;
    at = lineEnd + 4 + size;
  }
}

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((resolve) => server?.close(resolve));
  server = undefined;
});

describe("SseStream on a real connection", () => {
  it("writes events as HTTP/1.1 chunks, pre-made or not, in order and in one piece each", async () => {
    const port = await serve((_req, res) => {
      const stream = new SseStream(res, {});
      const shared = frame(2);
      stream.write(frame(1));
      stream.write(shared, httpChunk(shared));
      stream.writeParts([Buffer.from("id: 3\nevent: message\ndata: {\"n\""), Buffer.from(":3"), Buffer.from("}\n\n")]);
      setImmediate(() => stream.write(frame(4)));
    });
    const text = await exchange(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", (t) => t.includes('{"n":4}'));
    const head = text.slice(0, text.indexOf("\r\n\r\n"));
    expect(head).toMatch(/transfer-encoding: chunked/i);
    expect(dechunk(text.slice(head.length + 4))).toBe([1, 2, 3, 4].map((n) => frame(n).toString()).join(""));
  });

  it("writes plain bytes to an HTTP/1.0 client (no chunking)", async () => {
    const port = await serve((_req, res) => {
      const stream = new SseStream(res, {});
      const shared = frame(1);
      stream.write(shared, httpChunk(shared));
      stream.writeParts([Buffer.from("id: 2\nevent: message\ndata: "), Buffer.from('{"n":2}'), Buffer.from("\n\n")]);
    });
    const text = await exchange(port, "GET / HTTP/1.0\r\nHost: x\r\n\r\n", (t) => t.includes('{"n":2}\n\n'));
    const body = text.slice(text.indexOf("\r\n\r\n") + 4);
    expect(body).toBe(frame(1).toString() + frame(2).toString());
  });

  it("queues a pipelined stream's events behind the response before it", async () => {
    let finishFirst: (() => void) | undefined;
    const port = await serve((req, res) => {
      if (req.url === "/slow") {
        finishFirst = () => res.end("first");
        return;
      }
      // The connection still writes /slow: this response has no socket yet.
      const stream = new SseStream(res, {});
      const shared = frame(1);
      stream.write(shared, httpChunk(shared));
      stream.write(frame(2));
      setTimeout(() => finishFirst?.(), 50);
    });
    const text = await exchange(port, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /sse HTTP/1.1\r\nHost: x\r\n\r\n", (t) => t.includes('{"n":2}'));
    const second = text.indexOf("HTTP/1.1 200", 1);
    expect(text.slice(0, second)).toMatch(/\r\n\r\nfirst$/);
    const rest = text.slice(second);
    expect(dechunk(rest.slice(rest.indexOf("\r\n\r\n") + 4))).toBe(frame(1).toString() + frame(2).toString());
  });
});
