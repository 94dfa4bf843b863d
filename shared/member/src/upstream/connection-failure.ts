import { ProtocolError, SdkError, SdkErrorCode, SdkHttpError } from "@modelcontextprotocol/client";
import { isTooLarge } from "./backend-http.js";

/** SDK error codes that mean the connection itself is gone, not that one answer was bad. */
const CONNECTION_CODES: ReadonlySet<string> = new Set<string>([SdkErrorCode.ConnectionClosed, SdkErrorCode.NotConnected, SdkErrorCode.SendFailed]);

/**
 * HTTP statuses of a failed POST that mean the session or the server is gone: 404 is the legacy
 * transport's "unknown session, initialize again" (in the 2026-07-28 era, which has no sessions,
 * it is "method not found", an answer to that one request); 502/503/504 say nothing is serving
 * behind a proxy. Any other status (400, 401, 500, ...) fails only the request that got it.
 */
const CONNECTION_STATUSES: ReadonlySet<number> = new Set([404, 502, 503, 504]);

/**
 * Whether a failed backend request means the connection is unusable (so the backend must be
 * reconnected), as opposed to a failure of that one request. An allowlist: anything not known to be
 * connection-level (a malformed result, an unsupported result type, an HTTP error on one POST, an
 * unknown error) is treated as a per-request failure, so one bad answer cannot take a backend down.
 */
export function isConnectionFailure(error: unknown, era: "legacy" | "modern" | undefined = "legacy"): boolean {
  if (error instanceof SdkHttpError) return CONNECTION_STATUSES.has(error.status) && !(error.status === 404 && era === "modern");
  if (error instanceof SdkError) return CONNECTION_CODES.has(error.code);
  // fetch() rejects with a TypeError on a network error; undici puts the socket error, which has a
  // `code` (ECONNREFUSED, ECONNRESET, UND_ERR_SOCKET, ...), in `cause`.
  // A message over the size limit fails that request alone (see `BackendHttp`).
  return error instanceof TypeError && hasCode(error.cause) && !isTooLarge(error);
}

function hasCode(cause: unknown): boolean {
  return typeof cause === "object" && cause !== null && typeof (cause as { code?: unknown }).code === "string";
}

/**
 * The JSON-RPC error a 2026-07-28 server answered a POST with under a non-2xx status (404 for an
 * unknown method, 400 for a missing capability), which the SDK reports as an HTTP failure with the
 * body in its message; undefined when there is none.
 */
export function jsonRpcErrorOf(error: unknown): ProtocolError | undefined {
  if (!(error instanceof SdkHttpError)) return undefined;
  const start = error.message.indexOf("{");
  if (start < 0) return undefined;
  try {
    const body = JSON.parse(error.message.slice(start)) as { error?: { code?: unknown; message?: unknown; data?: unknown } };
    const inner = body.error;
    if (typeof inner?.code !== "number" || typeof inner.message !== "string") return undefined;
    return new ProtocolError(inner.code, inner.message, inner.data);
  } catch {
    return undefined;
  }
}
