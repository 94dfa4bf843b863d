import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { constants, createServer as createHttp2Server, type Http2ServerRequest, type Http2ServerResponse, type Http2Session, type ServerHttp2Stream } from "node:http2";
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
  options: {
    sniffTimeoutMs: number;
    /** A request's body must have arrived this long after its headers, or it gets 408 (HTTP/1's `requestTimeout`). */
    requestTimeoutMs: number;
    /** A connection with no stream open this long is closed (HTTP/1's `keepAliveTimeout`). */
    idleTimeoutMs: number;
  },
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
      // Node 20's HTTP/2 response has no `destroyed`, which the broker reads to tell a client gone
      // before its answer (a stream reset while its session was looked up stayed open for good).
      Object.defineProperty(res, "destroyed", { get: () => res.stream.destroyed });
      bodyDeadline(req, res, options.requestTimeoutMs);
      handle(req as unknown as IncomingMessage, res as unknown as ServerResponse);
    },
  );
  const sessions = new Set<Http2Session>();
  h2.on("session", (session: Http2Session) => {
    sessions.add(session);
    closeWhenIdle(session, options.idleTimeoutMs);
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

/**
 * A request whose body has not all arrived `ms` after its headers gets 408 and its stream is reset,
 * as HTTP/1's `requestTimeout` ends a slow request (a stalled body was held for good, and counted
 * as in flight by a stopping broker). An event stream's response is not limited.
 */
function bodyDeadline(req: Http2ServerRequest, res: Http2ServerResponse, ms: number): void {
  // A request without a body (a GET, a DELETE) has all arrived with its headers.
  if (req.complete || req.stream.endAfterHeaders || ms <= 0) return;
  const timer = setTimeout(() => {
    if (req.complete || res.stream.destroyed) return;
    const reset = (): void => {
      if (!res.stream.destroyed) res.stream.close(constants.NGHTTP2_CANCEL);
    };
    if (res.headersSent) {
      reset();
      return;
    }
    const body = JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32600, message: `Request timeout: the request's body did not arrive within ${ms} ms.` } });
    res.writeHead(408, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body, reset);
  }, ms);
  timer.unref();
  const done = (): void => clearTimeout(timer);
  req.once("end", done);
  res.once("close", done);
}

/**
 * Closes `session` (GOAWAY) once it has had no stream open for `ms`, from its start too: a
 * connection that sends only its preface, or whose client went quiet, held its socket for good.
 * A load balancer opens another when it needs one.
 */
function closeWhenIdle(session: Http2Session, ms: number): void {
  let open = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = (): void => {
    timer = setTimeout(() => session.close(), ms);
    timer.unref();
  };
  arm();
  session.on("stream", (stream: ServerHttp2Stream) => {
    open++;
    clearTimeout(timer);
    stream.once("close", () => {
      if (--open === 0 && !session.closed && !session.destroyed) arm();
    });
  });
  session.once("close", () => clearTimeout(timer));
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
