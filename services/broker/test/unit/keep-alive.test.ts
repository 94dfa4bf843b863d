import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import type { Clock } from "@mcp-broker/shared";
import { afterEach, describe, expect, it, vi } from "vitest";
import { KeepAlive, SseStream } from "../../src/http/sse-stream.js";

/** Enough of a ServerResponse for SseStream: records what is written. */
function response(): ServerResponse & { written: string[] } {
  const res = Object.assign(new EventEmitter(), {
    written: [] as string[],
    writableLength: 0,
    writeHead: () => res,
    flushHeaders: () => undefined,
    cork: () => undefined,
    uncork: () => undefined,
    write: (chunk: Buffer | string) => res.written.push(chunk.toString()),
    end: () => res.emit("close"),
  });
  return res as unknown as ServerResponse & { written: string[] };
}

describe("keep-alive: one timer for every open stream", () => {
  afterEach(() => {
    vi.useRealTimers();
  });
  const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };

  it("sends each open stream a comment every period, and stops when none is left", async () => {
    vi.useFakeTimers();
    const keepAlive = new KeepAlive(clock, 1_000);
    const [a, b] = [response(), response()];
    const streamA = new SseStream(a, { keepAlive });
    new SseStream(b, { keepAlive });
    await vi.advanceTimersByTimeAsync(1_000);
    expect(a.written).toEqual([": keep-alive\n\n"]);
    expect(b.written).toEqual([": keep-alive\n\n"]);
    streamA.close();
    b.emit("close");
    await vi.advanceTimersByTimeAsync(1_000);
    expect(a.written).toHaveLength(1);
    expect(b.written).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("is off with a period of 0", async () => {
    vi.useFakeTimers();
    const keepAlive = new KeepAlive(clock, 0);
    const res = response();
    new SseStream(res, { keepAlive });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(res.written).toEqual([]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
