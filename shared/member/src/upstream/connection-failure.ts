import { SdkError, SdkErrorCode, SdkHttpError } from "@modelcontextprotocol/client";

/** SDK error codes that mean the connection itself is gone, not that one answer was bad. */
const CONNECTION_CODES: ReadonlySet<string> = new Set<string>([SdkErrorCode.ConnectionClosed, SdkErrorCode.NotConnected, SdkErrorCode.SendFailed]);

/**
 * HTTP statuses of a failed POST that mean the session or the server is gone: 404 is the
 * transport's "unknown session, initialize again"; 502/503/504 say nothing is serving behind a
 * proxy. Any other status (400, 401, 500, ...) fails only the request that got it.
 */
const CONNECTION_STATUSES: ReadonlySet<number> = new Set([404, 502, 503, 504]);

/**
 * Whether a failed backend request means the connection is unusable (so the backend must be
 * reconnected), as opposed to a failure of that one request. An allowlist: anything not known to be
 * connection-level (a malformed result, an unsupported result type, an HTTP error on one POST, an
 * unknown error) is treated as a per-request failure, so one bad answer cannot take a backend down.
 */
export function isConnectionFailure(error: unknown): boolean {
  if (error instanceof SdkHttpError) return CONNECTION_STATUSES.has(error.status);
  if (error instanceof SdkError) return CONNECTION_CODES.has(error.code);
  // fetch() rejects with a TypeError on a network error; undici puts the socket error, which has a
  // `code` (ECONNREFUSED, ECONNRESET, UND_ERR_SOCKET, ...), in `cause`.
  return error instanceof TypeError && hasCode(error.cause);
}

function hasCode(cause: unknown): boolean {
  return typeof cause === "object" && cause !== null && typeof (cause as { code?: unknown }).code === "string";
}
