import { connect, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from "node:http2";
import type { HttpCall, HttpResponse } from "./http-client.js";

/** Streams one HTTP/2 connection of a generator carries (sessions opened with `http2`). */
export const H2_STREAMS_PER_CONNECTION = 1_000;

/** A stream of an HTTP/2 connection opened as a response: its status and headers, and its body as it comes. */
export interface H2Stream {
  status: number;
  headers: IncomingHttpHeaders;
  stream: ClientHttp2Stream;
}

/**
 * HTTP/2 without TLS (prior knowledge) to the servers under test, as a load balancer speaking
 * HTTP/2 to its backends would: each connection carries up to `streamsPerConnection` requests and
 * event streams at once, so a generator holds many more sessions than it has open files. One set
 * of connections per origin and source address.
 */
export class H2Pool {
  private readonly connections = new Map<string, { session: ClientHttp2Session; streams: number }[]>();

  constructor(private readonly streamsPerConnection: number) {}

  fetchText(url: URL, call: HttpCall): Promise<HttpResponse> {
    return new Promise((resolve, reject) => {
      const stream = this.request(url, call);
      let status = 0;
      let headers: IncomingHttpHeaders = {};
      const chunks: Buffer[] = [];
      stream.once("response", (h) => {
        status = Number(h[":status"]);
        headers = h;
      });
      stream.on("data", (chunk: Buffer) => chunks.push(chunk));
      stream.once("end", () => resolve({ status, headers, body: Buffer.concat(chunks).toString("utf8") }));
      stream.once("error", reject);
    });
  }

  /** Opens a streaming response; resolves at its headers (the body is read by the caller). */
  openStream(url: URL, call: HttpCall): Promise<H2Stream> {
    return new Promise((resolve, reject) => {
      const stream = this.request(url, call);
      stream.once("error", reject);
      stream.once("response", (headers) => resolve({ status: Number(headers[":status"]), headers, stream }));
    });
  }

  close(): void {
    for (const list of this.connections.values()) for (const { session } of list) session.destroy();
    this.connections.clear();
  }

  private request(url: URL, call: HttpCall): ClientHttp2Stream {
    const connection = this.connection(url, call.localAddress);
    connection.streams++;
    const headers: Record<string, string | number> = { ":method": call.method, ":path": url.pathname + url.search, ...call.headers };
    if (call.body !== undefined) headers["content-length"] = Buffer.byteLength(call.body);
    const stream = connection.session.request(headers);
    stream.once("close", () => connection.streams--);
    if (call.timeoutMs !== undefined) {
      const timer = setTimeout(() => stream.close(), call.timeoutMs);
      stream.once("response", () => clearTimeout(timer));
      stream.once("close", () => clearTimeout(timer));
    }
    stream.end(call.body);
    return stream;
  }

  /** A connection to `url`'s origin from `localAddress` with room for one more stream. */
  private connection(url: URL, localAddress: string | undefined): { session: ClientHttp2Session; streams: number } {
    const key = `${url.origin} ${localAddress ?? ""}`;
    let list = this.connections.get(key);
    if (list === undefined) {
      list = [];
      this.connections.set(key, list);
    }
    const open = list.find((c) => c.streams < this.streamsPerConnection && !c.session.closed && !c.session.destroyed);
    if (open !== undefined) return open;
    const session = connect(url.origin, {
      ...(localAddress !== undefined && { localAddress }),
      // Thousands of streams on one connection: nghttp2's own state outgrows the 10 MB default.
      maxSessionMemory: 256,
      // A broadcast is one frame for each of thousands of streams: the connection's window takes it without waiting for updates.
      settings: { initialWindowSize: 1 << 20 },
    });
    session.on("error", () => undefined);
    session.once("connect", () => session.setLocalWindowSize(64 << 20));
    const entry = { session, streams: 0 };
    const all = list;
    session.once("close", () => {
      const at = all.indexOf(entry);
      if (at >= 0) all.splice(at, 1);
    });
    list.push(entry);
    return entry;
  }
}
