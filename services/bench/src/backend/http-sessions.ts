/**
 * The HTTP mode of the bench backend: legacy (2025-11-25) Streamable HTTP on 127.0.0.1, sessionful
 * (`Mcp-Session-Id`, standalone GET stream, DELETE), one SDK `WebStandardStreamableHTTPServerTransport`
 * and one BenchMcp connection per session, so several brokers can each hold their own session on
 * one backend process.
 *
 * The SDK transport speaks web `Request`/`Response`; the few lines bridging node:http are here
 * (the SDK's Node adapter is not a dependency). The bridge honours socket backpressure: a stream
 * whose socket is full stops being read until it drains, and `WriteStalls` reports that to the
 * emission loop, which then waits, as it waits for a full stdout pipe in stdio mode.
 */
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/server";
import type { Backpressure } from "../core/paced-loop.js";
import type { BenchMcp } from "./bench-mcp.js";

export const MCP_PATH = "/mcp";

/** Responses whose socket is full: emission waits until none is. */
export class WriteStalls implements Backpressure {
  private readonly stalled = new Set<ServerResponse>();
  private waiters: (() => void)[] = [];

  blocked(): boolean {
    return this.stalled.size > 0;
  }

  unblocked(): Promise<void> {
    if (this.stalled.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Resolves once `res` drained or closed. */
  async drain(res: ServerResponse): Promise<void> {
    this.stalled.add(res);
    await new Promise<void>((resolve) => {
      const done = (): void => {
        res.off("drain", done);
        res.off("close", done);
        resolve();
      };
      res.on("drain", done);
      res.on("close", done);
    });
    this.stalled.delete(res);
    if (this.stalled.size > 0) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const resolve of waiters) resolve();
  }
}

export interface HttpSessions {
  /** The MCP endpoint, `http://127.0.0.1:<port>/mcp`. */
  readonly url: string;
  /** Ends every session, then closes every connection. */
  close(): Promise<void>;
}

export async function listenHttp(bench: BenchMcp, stalls: WriteStalls, sessionIdleMs = 0): Promise<HttpSessions> {
  const sessions = new Map<string, WebStandardStreamableHTTPServerTransport>();
  /** Each session's open standalone GET stream, where its notifications go. */
  const notificationStreams = new Map<string, ServerResponse>();
  /** Sessions without a notification stream, since when (ms); ended after `sessionIdleMs` (when set). */
  const streamless = new Map<string, number>();
  const sweep =
    sessionIdleMs > 0
      ? setInterval(() => {
          const now = Date.now();
          for (const [sessionId, since] of streamless) {
            if (now - since < sessionIdleMs) continue;
            streamless.delete(sessionId);
            const transport = sessions.get(sessionId);
            sessions.delete(sessionId);
            void transport?.close().catch(() => undefined);
          }
        }, 1_000)
      : undefined;
  sweep?.unref();

  const openSession = async (request: Request): Promise<Response> => {
    const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (sessionId) => {
        sessions.set(sessionId, transport);
        streamless.set(sessionId, Date.now());
      },
    });
    // `resources/updated` frames go straight onto the session's GET stream, as the SDK's transport
    // would write them but without its per-event web-stream hop, so that the update source stays
    // as light as over stdio (the broker reads the same event stream either way).
    const direct = (notification: string): boolean => {
      const res = transport.sessionId === undefined ? undefined : notificationStreams.get(transport.sessionId);
      if (res === undefined) return false;
      // A full socket holds the emission back, as the SDK's stream does.
      if (!writeCorked(res, `event: message\ndata: ${notification}\n\n`)) void stalls.drain(res);
      return true;
    };
    const mcp = await bench.connect(
      transport,
      () => {
        if (transport.sessionId === undefined) return;
        sessions.delete(transport.sessionId);
        streamless.delete(transport.sessionId);
      },
      direct,
    );
    const response = await transport.handleRequest(request);
    // Anything but a successful initialize leaves no session behind.
    if (transport.sessionId === undefined || !sessions.has(transport.sessionId)) await mcp.close();
    return response;
  };

  const handle = async (request: Request): Promise<Response> => {
    if (new URL(request.url).pathname !== MCP_PATH) return new Response("not found", { status: 404 });
    const sessionId = request.headers.get("mcp-session-id");
    if (sessionId === null) {
      return request.method === "POST" ? openSession(request) : jsonRpcError(400, -32000, "Bad Request: Mcp-Session-Id header is required");
    }
    const transport = sessions.get(sessionId);
    return transport === undefined ? jsonRpcError(404, -32001, "Session not found") : transport.handleRequest(request);
  };

  const server = createServer((req, res) => {
    const sessionId = req.headers["mcp-session-id"];
    if (req.method === "GET" && typeof sessionId === "string") {
      res.once("close", () => {
        if (notificationStreams.get(sessionId) !== res) return;
        notificationStreams.delete(sessionId);
        if (sessions.has(sessionId)) streamless.set(sessionId, Date.now());
      });
      void bridge(handle, req, res, stalls, () => {
        notificationStreams.set(sessionId, res);
        streamless.delete(sessionId);
      });
      return;
    }
    void bridge(handle, req, res, stalls);
  });
  server.requestTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${MCP_PATH}`,
    close: async () => {
      clearInterval(sweep);
      await bench.close();
      await closeServer(server);
    },
  };
}

/** Writes `text`, corked until the end of this turn of the event loop (writes in one turn leave in one write). */
function writeCorked(res: ServerResponse, text: string | Uint8Array): boolean {
  if (res.writableCorked === 0) {
    res.cork();
    process.nextTick(() => res.uncork());
  }
  return res.write(text);
}

/** One node:http exchange through a web handler; a client that goes away aborts the request's signal. `onStream` hears an event stream open. */
async function bridge(handle: (request: Request) => Promise<Response>, req: IncomingMessage, res: ServerResponse, stalls: WriteStalls, onStream?: () => void): Promise<void> {
  const gone = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) gone.abort();
  });
  let response: Response;
  try {
    response = await handle(await webRequest(req, gone.signal));
  } catch (error) {
    process.stderr.write(`[bench-backend] request failed: ${String(error)}\n`);
    if (!res.headersSent) res.writeHead(500);
    res.end();
    return;
  }
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (response.body === null) {
    res.end();
    return;
  }
  // Event streams: headers now, so the client sees the stream open before its first event.
  res.flushHeaders();
  if (response.status === 200 && response.headers.get("content-type")?.startsWith("text/event-stream") === true) onStream?.();
  const reader = response.body.getReader();
  res.once("close", () => {
    reader.cancel().catch(() => undefined);
  });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!writeCorked(res, value)) await stalls.drain(res);
    }
  } catch {
    // Cancelled: the client went away.
  }
  res.end();
}

async function webRequest(req: IncomingMessage, signal: AbortSignal): Promise<Request> {
  const headers = new Headers();
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string);
  const method = req.method ?? "GET";
  let body: string | undefined;
  if (method !== "GET" && method !== "HEAD") {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    body = Buffer.concat(chunks).toString("utf8");
  }
  return new Request(new URL(req.url ?? "/", "http://127.0.0.1"), { method, headers, signal, ...(body !== undefined && { body }) });
}

async function closeServer(server: Server): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeAllConnections();
  await closed;
}

function jsonRpcError(status: number, code: number, message: string): Response {
  return Response.json({ jsonrpc: "2.0", error: { code, message }, id: null }, { status });
}
