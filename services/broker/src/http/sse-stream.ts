import type { ServerResponse } from "node:http";
import type { Clock, TimerHandle } from "@mcp-broker/shared";

/**
 * One open Server-Sent Events response. Frames are written pre-encoded: a notification that goes
 * to many streams is serialised once (see `encodeFrame`) and the same buffer is written to each.
 * Writes after close are dropped. Backpressure: when the socket buffer is over `maxBufferedBytes`
 * the stream is closed (the client resumes with Last-Event-ID) rather than buffering without bound.
 */
export class SseStream {
  private closedFlag = false;
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
      connection: "keep-alive",
      "x-accel-buffering": "no",
      ...options.headers,
    });
    if (options.retryMs !== undefined) res.write(`retry: ${Math.max(0, Math.round(options.retryMs))}\n\n`);
    else res.flushHeaders();
    flattenHeaderBlock(res);
    res.on("close", () => this.markClosed());
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

  /** Writes one pre-encoded event (see `encodeEvent`); returns false when the stream is closed. */
  write(frame: Buffer): boolean {
    if (this.closedFlag) return false;
    this.res.write(frame);
    return this.checkBuffered();
  }

  /** A client that does not read is cut off (it can resume) rather than buffered for without bound. */
  private checkBuffered(): boolean {
    if (this.res.writableLength > this.maxBufferedBytes) {
      this.close();
      return false;
    }
    return true;
  }

  /** Writes one event given in parts (a shared head and tail around a per-stream piece), without copying them together. */
  writeParts(parts: readonly Buffer[]): boolean {
    if (this.closedFlag) return false;
    this.res.cork();
    for (const part of parts) this.res.write(part);
    process.nextTick(() => this.res.uncork());
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
      for (const stream of this.streams) stream.write(KEEP_ALIVE_FRAME);
      if (this.streams.size > 0) this.arm();
    }, this.periodMs);
    this.timer.unref?.();
  }
}
