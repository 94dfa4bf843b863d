import { ProtocolError, SdkError, SdkErrorCode, SdkHttpError } from "@modelcontextprotocol/client";
import type { Clock } from "@mcp-broker/shared";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { isConnectionFailure, jsonRpcErrorOf } from "../../src/upstream/connection-failure.js";
import { summarizeFailure } from "../../src/upstream/failure-summary.js";
import { NotificationStreamWatch } from "../../src/upstream/notification-stream-watch.js";

const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };

function networkError(code: string): TypeError {
  return new TypeError("fetch failed", { cause: Object.assign(new Error(`connect ${code}`), { code }) });
}

describe("which backend request failures drop the connection", () => {
  it.each([
    ["the connection closed", new SdkError(SdkErrorCode.ConnectionClosed, "Connection closed")],
    ["not connected", new SdkError(SdkErrorCode.NotConnected, "Not connected")],
    ["a failed send", new SdkError(SdkErrorCode.SendFailed, "send failed")],
    ["an unknown session (HTTP 404)", new SdkHttpError(SdkErrorCode.ClientHttpNotImplemented, "Error POSTing", { status: 404 })],
    ["nothing behind the proxy (HTTP 503)", new SdkHttpError(SdkErrorCode.ClientHttpNotImplemented, "Error POSTing", { status: 503 })],
    ["a refused connection", networkError("ECONNREFUSED")],
    ["a reset socket", networkError("UND_ERR_SOCKET")],
  ])("%s does", (_what, error) => {
    expect(isConnectionFailure(error)).toBe(true);
  });

  it.each([
    ["a malformed result", new SdkError(SdkErrorCode.InvalidResult, "Invalid result for tools/call")],
    ["a modern input_required result", new SdkError(SdkErrorCode.UnsupportedResultType, "Unsupported result type 'input_required'")],
    ["an unexpected content type", new SdkError(SdkErrorCode.ClientHttpUnexpectedContent, "Unexpected content type")],
    ["a timeout", new SdkError(SdkErrorCode.RequestTimeout, "Request timed out")],
    ["a server error on one POST (HTTP 500)", new SdkHttpError(SdkErrorCode.ClientHttpNotImplemented, "Error POSTing", { status: 500 })],
    ["a backend's JSON-RPC error", new ProtocolError(-32603, "boom")],
    ["a TypeError that is not a network error", new TypeError("x is not a function")],
    ["an unknown error", new Error("something else")],
  ])("%s does not", (_what, error) => {
    expect(isConnectionFailure(error)).toBe(false);
  });

  it("takes a modern backend's HTTP 404 for its answer (method not found, the 2026-07-28 transport's status), not a lost session", () => {
    const notFound = new SdkHttpError(SdkErrorCode.ClientHttpNotImplemented, 'Error POSTing to endpoint: {"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not found"}}', { status: 404 });
    expect(isConnectionFailure(notFound, "legacy")).toBe(true);
    expect(isConnectionFailure(notFound, "modern")).toBe(false);
    expect(jsonRpcErrorOf(notFound)).toMatchObject({ code: -32601, message: expect.stringContaining("Method not found") as unknown });
    expect(jsonRpcErrorOf(new SdkHttpError(SdkErrorCode.ClientHttpNotImplemented, "Error POSTing to endpoint: <html>", { status: 404 }))).toBeUndefined();
  });
});

describe("the notification stream watch", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("runs the transport's reopen attempts on the clock and declares the stream lost instead of the attempt past the limit", async () => {
    const watch = new NotificationStreamWatch({ clock, maxAttempts: 3 });
    const lost: string[] = [];
    watch.onLost((reason) => lost.push(reason));
    const reconnects: number[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      watch.scheduler(() => reconnects.push(attempt), 100, attempt);
      // A failed attempt is reported before the next is scheduled: not a loss by itself.
      watch.observe(new SdkHttpError(SdkErrorCode.ClientHttpFailedToOpenStream, "Failed to open SSE stream", { status: 503 }));
      await vi.advanceTimersByTimeAsync(100);
    }
    expect(reconnects).toEqual([0, 1, 2]);
    expect(lost).toEqual([]);
    watch.scheduler(() => reconnects.push(3), 100, 3);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(reconnects).toEqual([0, 1, 2]);
    expect(lost).toHaveLength(1);
  });

  it("declares the stream lost when its first GET fails (the SDK never retries that one), once", () => {
    const watch = new NotificationStreamWatch({ clock, maxAttempts: 3 });
    watch.observe(new SdkHttpError(SdkErrorCode.ClientHttpFailedToOpenStream, "Failed to open SSE stream", { status: 500 }));
    const lost: string[] = [];
    watch.onLost((reason) => lost.push(reason)); // registered late: hears it at once
    watch.observe(new SdkHttpError(SdkErrorCode.ClientHttpFailedToOpenStream, "Failed to open SSE stream", { status: 500 }));
    expect(lost).toHaveLength(1);
  });

  it("ignores other transport errors, and everything once disposed", async () => {
    const watch = new NotificationStreamWatch({ clock, maxAttempts: 1 });
    const lost: string[] = [];
    watch.onLost((reason) => lost.push(reason));
    watch.observe(new Error("SSE stream disconnected"));
    watch.observe(new SdkHttpError(SdkErrorCode.ClientHttpNotImplemented, "Error POSTing", { status: 500 }));
    expect(lost).toEqual([]);
    const reconnect = vi.fn();
    watch.scheduler(reconnect, 100, 0);
    watch.dispose();
    await vi.advanceTimersByTimeAsync(200);
    watch.scheduler(reconnect, 100, 1);
    expect(reconnect).not.toHaveBeenCalled();
    expect(lost).toEqual([]);
  });

  it("reports the stream open again once per gap, when a GET after a scheduled retry gets an event stream", async () => {
    let status = 200;
    const stream = (): Response => new Response(status === 200 ? "" : "down", { status, headers: { "content-type": status === 200 ? "text/event-stream" : "text/plain" } });
    const watch = new NotificationStreamWatch({ clock, maxAttempts: 5 });
    const fetch = watch.wrap(async () => stream());
    const reopened = vi.fn();
    watch.onReopened(reopened);
    const get = (): Promise<Response> => fetch("http://backend/mcp", { method: "GET" });

    await get(); // the first GET: no gap before it
    expect(reopened).not.toHaveBeenCalled();

    status = 503;
    watch.scheduler(() => void get(), 100, 0); // the stream dropped; the SDK retries...
    await vi.advanceTimersByTimeAsync(100);
    await fetch("http://backend/mcp", { method: "POST" }); // (requests go on meanwhile)
    expect(reopened).not.toHaveBeenCalled(); // ...and is refused
    status = 200;
    watch.scheduler(() => void get(), 200, 1);
    await vi.advanceTimersByTimeAsync(200);
    expect(reopened).toHaveBeenCalledTimes(1);
    await get();
    expect(reopened).toHaveBeenCalledTimes(1);

    watch.scheduler(() => void get(), 100, 0); // a second gap is a second report
    await vi.advanceTimersByTimeAsync(100);
    expect(reopened).toHaveBeenCalledTimes(2);
  });
});

describe("a backend failure as /readyz shows it", () => {
  it("is the first line, cut at 300 characters", () => {
    expect(summarizeFailure(`connect failed: Error POSTing to endpoint (HTTP 502): <html>\n<body>${"x".repeat(5_000)}</body>\n</html>`)).toBe(
      "connect failed: Error POSTing to endpoint (HTTP 502): <html>",
    );
    const long = summarizeFailure(`request failed: ${"y".repeat(1_000)}`);
    expect(long).toHaveLength(300);
    expect(long.endsWith("…")).toBe(true);
  });

  it("turns a zod issue list into its first issue, and leaves other brackets alone", () => {
    const issues = JSON.stringify(
      [
        { code: "invalid_type", path: ["result", "tools", 0, "name"], message: "Invalid input: expected string, received number" },
        { code: "invalid_type", path: ["result", "nextCursor"], message: "Invalid input: expected string, received null" },
      ],
      null,
      2,
    );
    expect(summarizeFailure(`Invalid result for tools/list: ${issues}`)).toBe("Invalid result for tools/list: result.tools.0.name: Invalid input: expected string, received number (and 1 more)");
    expect(summarizeFailure("a [b] of [ {not json")).toBe("a [b] of [ {not json");
  });
});
