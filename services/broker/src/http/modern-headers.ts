import { UnsupportedProtocolVersionError } from "@modelcontextprotocol/server";
import { MODERN_PROTOCOL_VERSION } from "@mcp-broker/shared";

/** What a modern request's standard headers are checked against. */
export interface ModernRequestHeaders {
  protocolVersion: string | undefined;
  mcpMethod: string | undefined;
  mcpName: string | undefined;
}

export interface HeaderRejection {
  status: 400;
  code: number;
  message: string;
  data?: unknown;
}

/** The body field each method's `Mcp-Name` header mirrors. */
const NAME_SOURCE: Readonly<Record<string, "name" | "uri">> = {
  "tools/call": "name",
  "prompts/get": "name",
  "resources/read": "uri",
};

const HEADER_MISMATCH = -32020;
const SENTINEL_PREFIX = "=?base64?";
const SENTINEL_SUFFIX = "?=";
const CANONICAL_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * The checks the SDK's classification leaves to the HTTP entry (its own handler runs them; the
 * broker serves HTTP itself): the revision named is one this broker speaks, and the standard
 * headers a modern request must carry are present and agree with the body (`MCP-Protocol-Version`
 * and `Mcp-Method` always; `Mcp-Name`, decoded from its `=?base64?…?=` form where used, for
 * tools/call, prompts/get and resources/read). A proxy may route or authorise on these headers,
 * so a request that names one tool in its headers and another in its body is refused.
 * Mismatches the classification already catches (version or method disagreeing) never get here.
 */
export function checkModernRequest(
  headers: ModernRequestHeaders,
  revision: string | undefined,
  method: string,
  params: unknown,
): HeaderRejection | undefined {
  const unsupported = unsupportedRevision(revision);
  if (unsupported !== undefined) return unsupported;
  if (headers.protocolVersion === undefined) return mismatch(`The MCP-Protocol-Version header is required (${MODERN_PROTOCOL_VERSION}).`);
  if (headers.mcpMethod === undefined) return mismatch(`The Mcp-Method header is required; the body names '${method}'.`);
  const field = Object.hasOwn(NAME_SOURCE, method) ? NAME_SOURCE[method] : undefined;
  if (field === undefined) return undefined;
  const raw = typeof params === "object" && params !== null ? (params as Record<string, unknown>)[field] : undefined;
  const bodyValue = typeof raw === "string" ? raw : undefined;
  if (headers.mcpName === undefined) {
    return bodyValue === undefined ? undefined : mismatch(`The Mcp-Name header is required for ${method}; the body names '${bodyValue}'.`);
  }
  const decoded = decodeHeaderValue(headers.mcpName.trim());
  if (decoded === undefined) return mismatch("The Mcp-Name header carries an invalid =?base64?…?= value.");
  if (bodyValue !== undefined && decoded !== bodyValue) {
    return mismatch(`The Mcp-Name header names '${decoded}' but the body's params.${field} is '${bodyValue}'.`);
  }
  return undefined;
}

/** A modern request naming a revision this broker does not speak (HTTP and stdio alike). */
export function unsupportedRevision(revision: string | undefined): HeaderRejection | undefined {
  if (revision === MODERN_PROTOCOL_VERSION) return undefined;
  const error = new UnsupportedProtocolVersionError({ supported: [MODERN_PROTOCOL_VERSION], requested: revision ?? "unknown" });
  return { status: 400, code: error.code, message: error.message, data: error.data };
}

/** A header value as sent, or the UTF-8 text of its `=?base64?…?=` form; undefined when that form is malformed. */
function decodeHeaderValue(value: string): string | undefined {
  if (!(value.startsWith(SENTINEL_PREFIX) && value.endsWith(SENTINEL_SUFFIX))) return value;
  const encoded = value.slice(SENTINEL_PREFIX.length, value.length - SENTINEL_SUFFIX.length);
  if (!CANONICAL_BASE64.test(encoded)) return undefined;
  const text = new TextDecoder("utf-8", { fatal: true });
  try {
    return text.decode(Buffer.from(encoded, "base64"));
  } catch {
    return undefined;
  }
}

function mismatch(message: string): HeaderRejection {
  return { status: 400, code: HEADER_MISMATCH, message: `Header mismatch: ${message}` };
}
