import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { createServer as createHttp2Server, type Http2ServerRequest, type Http2ServerResponse, type Http2Session } from "node:http2";
import type { Socket } from "node:net";

/** What an HTTP/2 client sends first (RFC 9113 §3.4); no HTTP/1.x request begins with it. */
const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/**
 * HTTP/2 over plain TCP ("h2c" with prior knowledge, RFC 9113 §3.3) on the port of an HTTP/1.1
 * server, both served by `handle`. A load balancer that speaks HTTP/2 to its backends (HAProxy's
 * `proto h2`, Envoy) then carries many clients' requests and event streams over a few connections
 * to each broker: an idle session's stream is an HTTP/2 stream, not a socket, so the broker's
 * open files no longer grow with its sessions.
 *
 * Each new connection is read until its first bytes tell which it is; an HTTP/1.x connection goes
 * on to `server` as if nothing had read it (the bytes read are put back). Node's compatibility API
 * gives the handler a request and response that behave as HTTP/1's for what the broker uses; the
 * differences it has to mind are `isHttp2` and `connectionHeader`. `:authority` is copied to `host`
 * (an intermediary does the same when it forwards to HTTP/1.1), so the Host check sees it.
 *
 * Returns what ends the connections `server.closeAllConnections` does not know about: the HTTP/2
 * ones, and any still being read.
 */
export function serveH2cBeside(
  server: Server,
  handle: (req: IncomingMessage, res: ServerResponse) => void,
  options: { sniffTimeoutMs: number },
): { closeAll(): void } {
  const h2 = createHttp2Server(
    {
      // The defaults suit a browser's connection, not a load balancer's carrying thousands of event
      // streams: nghttp2 refuses new streams on a connection past 10 MB of its own state.
      maxSessionMemory: 256,
      settings: { maxConcurrentStreams: MAX_STREAMS_PER_CONNECTION },
    },
    (req: Http2ServerRequest, res: Http2ServerResponse) => {
      const authority = req.headers[":authority"];
      if (req.headers.host === undefined && typeof authority === "string") req.headers.host = authority;
      handle(req as unknown as IncomingMessage, res as unknown as ServerResponse);
    },
  );
  const sessions = new Set<Http2Session>();
  h2.on("session", (session: Http2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  const reading = new Set<Socket>();
  const http1 = server.listeners("connection") as ((socket: Socket) => void)[];
  server.removeAllListeners("connection");
  server.on("connection", (socket: Socket) => {
    reading.add(socket);
    let head: Buffer | undefined;
    // A connection that says nothing is ended, as HTTP/1's headers timeout would.
    const timer = setTimeout(() => socket.destroy(), options.sniffTimeoutMs);
    const done = (): void => {
      clearTimeout(timer);
      reading.delete(socket);
      socket.off("data", onData);
      socket.off("close", done);
      socket.off("error", done);
    };
    const onData = (chunk: Buffer): void => {
      head = head === undefined ? chunk : Buffer.concat([head, chunk]);
      const n = Math.min(head.length, PREFACE.length);
      const isH2 = head.subarray(0, n).equals(PREFACE.subarray(0, n));
      if (isH2 && n < PREFACE.length) return;
      done();
      socket.pause();
      socket.unshift(head);
      if (isH2) {
        // An HTTP/1 server's sockets stay half open at the peer's FIN (for a request still being
        // answered); an HTTP/2 connection that the peer ended is over, and its streams with it.
        socket.allowHalfOpen = false;
        // The session reads the socket itself, the bytes put back first (on its next tick).
        h2.emit("connection", socket);
        return;
      }
      for (const listener of http1) listener.call(server, socket);
      socket.resume();
    };
    socket.on("data", onData);
    socket.once("close", done);
    socket.once("error", done);
  });
  return {
    closeAll() {
      for (const socket of reading) socket.destroy();
      for (const session of sessions) session.destroy();
    },
  };
}

/** Streams one HTTP/2 connection may hold at once (a load balancer's connection carries many clients' event streams). */
const MAX_STREAMS_PER_CONNECTION = 1_000_000;

/** The request came over HTTP/2 (see `serveH2cBeside`). */
export function isHttp2(req: IncomingMessage | undefined): boolean {
  return req?.httpVersionMajor === 2;
}

/** `Connection: <value>` on HTTP/1.x; nothing on HTTP/2, which forbids connection-specific headers (RFC 9113 §8.2.2). */
export function connectionHeader(req: IncomingMessage | undefined, value: "close" | "keep-alive"): { connection?: string } {
  return isHttp2(req) ? {} : { connection: value };
}
