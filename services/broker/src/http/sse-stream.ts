import type { ServerResponse } from "node:http";
import type { Clock, TimerHandle } from "@mcp-broker/shared";
import { httpChunk } from "../fanout/sse-event.js";
import { connectionHeader, isHttp2 } from "./h2c.js";

/**
 * One open Server-Sent Events response. Frames are written pre-encoded: a notification that goes
 * to many streams is serialised once (see `encodeFrame`) and the same buffer is written to each.
 * Writes after close are dropped. Backpressure: when the socket buffer is over `maxBufferedBytes`
 * the stream is closed (the client resumes with Last-Event-ID) rather than buffering without bound.
 */
export class SseStream {
  private closedFlag = false;
  /** Corked by `corkForTick`, until `uncorkStreams` runs. */
  private corked = false;
  /** The response is chunked (HTTP/1.1): events can go to its socket as pre-made chunks (see `write`). */
  private readonly chunked: boolean;
  /**
   * Who hears the close: one listener in place, more in an array (an idle stream has one; a
   * listener array per stream cost about 0.2 KB per idle session).
   */
  private closeListeners: (() => void) | (() => void)[] | undefined;
  /** Only what outlives the constructor is kept (the response headers are written by then). */
  private readonly keepAlive: KeepAlive | undefined;
  private readonly maxBufferedBytes: number;

  constructor(
    private readonly res: ServerResponse,
    options: { keepAlive?: KeepAlive; maxBufferedBytes?: number; headers?: Record<string, string>; retryMs?: number },
  ) {
    this.keepAlive = options.keepAlive;
    this.maxBufferedBytes = options.maxBufferedBytes ?? 8 * 1024 * 1024;
    res.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache, no-transform",
      ...connectionHeader(res.req, "keep-alive"),
      "x-accel-buffering": "no",
      ...options.headers,
    });
    if (options.retryMs !== undefined) res.write(`retry: ${Math.max(0, Math.round(options.retryMs))}\n\n`);
    else res.flushHeaders();
    this.chunked = res.chunkedEncoding;
    flattenHeaderBlock(res);
    onConnectionGone(res, () => this.markClosed());
    this.keepAlive?.add(this);
  }

  get closed(): boolean {
    return this.closedFlag;
  }

  onClose(listener: () => void): void {
    if (this.closedFlag) listener();
    else if (this.closeListeners === undefined) this.closeListeners = listener;
    else if (typeof this.closeListeners === "function") this.closeListeners = [this.closeListeners, listener];
    else this.closeListeners.push(listener);
  }

  /**
   * Writes one pre-encoded event (see `encodeEvent`); returns false when the stream is closed.
   * `chunk`: the same event as an HTTP/1.1 chunk (`httpChunk`), when the caller writes it to many
   * streams. A chunked response gets it as one socket write: Node's `res.write` makes four (size
   * line, CRLF, the bytes, CRLF), and what those left for the end of a broadcast's loop outlived
   * young-generation GCs: in a probe of 9 000 plain SSE responses, ~0.4 KB per stream went to the
   * old space per broadcast and each took ~110 ms; as one pre-made chunk, none and ~85 ms.
   */
  write(frame: Buffer, chunk?: Buffer): boolean {
    if (this.closedFlag) return false;
    this.corkForTick();
    // No socket: another response on the connection is still being written (pipelining), and Node queues this one's.
    const socket = this.chunked ? this.res.socket : null;
    if (socket !== null && !socket.destroyed) socket.write(chunk ?? httpChunk(frame));
    else this.res.write(frame);
    return this.checkBuffered();
  }

  /**
   * Corks the response until the tick ends, so that whatever else this tick writes to it goes out
   * in the same `writev` (a hot resource's updates arrive several per tick). One `nextTick` uncorks
   * every stream corked in the tick (Node's own corking scheduled one per response), and a
   * broadcast uncorks each `CORK_BATCH` streams as it goes, so what waits is bounded.
   */
  private corkForTick(): void {
    if (this.corked) return;
    if (corkedStreams.length >= CORK_BATCH) uncorkStreams();
    this.corked = true;
    this.res.cork();
    corkedStreams.push(this);
    if (!uncorkScheduled) {
      uncorkScheduled = true;
      process.nextTick(uncorkStreams);
    }
  }

  /** Sends what was written while corked (see `corkForTick`). */
  uncork(): void {
    this.corked = false;
    this.res.uncork();
  }

  /** A client that does not read is cut off (it can resume) rather than buffered for without bound. */
  private checkBuffered(): boolean {
    if (this.res.writableLength > this.maxBufferedBytes) {
      this.close();
      return false;
    }
    return true;
  }

  /** Writes one event given in parts (a shared head and tail around a per-stream piece): one chunk on a chunked response (see `write`). */
  writeParts(parts: readonly Buffer[]): boolean {
    if (this.closedFlag) return false;
    this.corkForTick();
    const socket = this.chunked ? this.res.socket : null;
    if (socket !== null && !socket.destroyed) socket.write(httpChunk(...parts));
    // One write: over HTTP/2 each write is a DATA frame of its own (a probe of 10 000 streams on
    // ten connections: a broadcast of one frame in three writes took 150-200 ms, in one 70-130 ms).
    else this.res.write(Buffer.concat(parts));
    return this.checkBuffered();
  }

  /** Ends the response; with `retryMs`, first tells the client when to reconnect (SSE `retry`). */
  close(retryMs?: number): void {
    if (this.closedFlag) return;
    if (retryMs !== undefined) this.res.end(`retry: ${Math.max(0, Math.round(retryMs))}\n\n`);
    else this.res.end();
    this.markClosed();
  }

  private markClosed(): void {
    if (this.closedFlag) return;
    this.closedFlag = true;
    this.keepAlive?.delete(this);
    const listeners = this.closeListeners;
    this.closeListeners = undefined;
    if (typeof listeners === "function") listeners();
    else for (const listener of listeners ?? []) listener();
  }
}

/** Streams corked by a write in this tick (see `SseStream.corkForTick`). */
const corkedStreams: SseStream[] = [];
/** Beyond a hot resource's subscribers per instance (the bench's 1 000 keep one `writev` per tick each). */
const CORK_BATCH = 4_096;
let uncorkScheduled = false;

function uncorkStreams(): void {
  uncorkScheduled = false;
  const streams = corkedStreams.splice(0);
  for (const stream of streams) stream.uncork();
}

/**
 * Node keeps a response's header block (`_header`, for as long as the response lives) as it built
 * it: a string concatenated from some thirty pieces, which V8 holds as a tree of them. For a stream
 * that stays open for hours that was about 0.9 KB per idle session (heap snapshot, 10 000 legacy
 * sessions: 290 000 concatenated strings); reading a character makes V8 flatten it into one string
 * of its ~250 bytes, and the pieces go.
 */
function flattenHeaderBlock(res: ServerResponse): void {
  const header = (res as unknown as { _header?: unknown })._header;
  if (typeof header === "string") header.charCodeAt(0);
}

const KEEP_ALIVE_FRAME = Buffer.from(": keep-alive\n\n");
const KEEP_ALIVE_CHUNK = httpChunk(KEEP_ALIVE_FRAME);

/**
 * One timer for every open stream (a timer per stream costs memory per idle session): each
 * period, every stream gets an SSE comment, so proxies and clients see the connection alive.
 */
export class KeepAlive {
  private readonly streams = new Set<SseStream>();
  private timer: TimerHandle | undefined;

  /** `periodMs` 0 turns keep-alives off. */
  constructor(private readonly clock: Clock, private readonly periodMs: number) {}

  add(stream: SseStream): void {
    if (this.periodMs <= 0) return;
    this.streams.add(stream);
    this.arm();
  }

  delete(stream: SseStream): void {
    this.streams.delete(stream);
  }

  close(): void {
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    this.streams.clear();
  }

  private arm(): void {
    if (this.timer !== undefined) return;
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      for (const stream of this.streams) stream.write(KEEP_ALIVE_FRAME, KEEP_ALIVE_CHUNK);
      if (this.streams.size > 0) this.arm();
    }, this.periodMs);
    this.timer.unref?.();
  }
}

/**
 * Calls `listener` once, when `res` closes or its connection does. A response queued behind
 * another on a pipelined connection has no socket of its own yet, and Node emits no `close` for it
 * when the connection dies: a stream waiting there stayed open for good (its session never idled
 * out, a listen held its subscriptions and a slot of the session limit).
 */
export function onConnectionGone(res: ServerResponse, listener: () => void): void {
  // (`req` is always there on a real response; a stand-in of one may have none.) An HTTP/2
  // stream's socket is its connection's, shared with every other stream on it: the stream's own
  // `close` comes when either goes.
  const req = res.req as ServerResponse["req"] | undefined;
  const socket = isHttp2(req) ? null : (req?.socket ?? null);
  let called = false;
  const gone = (): void => {
    if (called) return;
    called = true;
    socket?.off("close", gone);
    listener();
  };
  res.once("close", gone);
  // Gone already (an HTTP/2 stream reset while its request was looked at): its close was before.
  if (res.destroyed) {
    queueMicrotask(gone);
    return;
  }
  if (socket === null) return;
  if (socket.destroyed) queueMicrotask(gone);
  else socket.once("close", gone);
}
