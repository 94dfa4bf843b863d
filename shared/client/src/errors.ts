/**
 * The client library's error catalog. Every error the library raises itself carries one of these
 * stable string codes; JSON-RPC errors from the server pass through unchanged as the SDK's
 * `ProtocolError` (numeric code). Branch on `code`, never on a message.
 *
 * The catalog is documented in README.md ("Errors"); a unit test fails when the two drift.
 */
export const CLIENT_ERROR_CATALOG = {
  NOT_CONNECTED: "The client is not connected (call connect(), or wait for the reconnect to finish).",
  ALREADY_CONNECTED: "connect() was called while the client is connecting, connected or reconnecting.",
  CONNECT_ABORTED: "disconnect() was called before connect() finished; the attempt was abandoned.",
  CAPABILITY_MISSING: "The server did not declare the capability this call needs (data.capability).",
  TEMPLATE_NOT_FOUND: "readResourceFromTemplate was given a URI template the server does not list (data.uriTemplate).",
  SUBSCRIPTION_REFUSED: "The server left the URI out of the subscriptions it agreed to honor (data.uri; data.error: the JSON-RPC error it gave as the reason, where it gave one).",
  TOOL_ERROR: "The tool ran and reported a failure (isError); the cached entry keeps its result.",
  CONNECTION_LOST: "The connection to the server dropped (data.reason); the client reconnects if its policy allows.",
  INVALID_OPTIONS: "The options given to the constructor are missing, out of range or inconsistent (the message names the option).",
} as const satisfies Record<string, string>;

export type BrokerClientErrorCode = keyof typeof CLIENT_ERROR_CATALOG;

export class BrokerClientError extends Error {
  override readonly name = "BrokerClientError";
  constructor(
    readonly code: BrokerClientErrorCode,
    message: string,
    readonly data?: Readonly<Record<string, unknown>>,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
