import { classifyInboundRequest, isJSONRPCRequest, PROTOCOL_VERSION_META_KEY } from "@modelcontextprotocol/server";
import { LEGACY_PROTOCOL_VERSIONS, isJsonObject } from "@mcp-broker/shared";

/** Where `classifyInboundRequest` routes a plain legacy request (see `isPlainLegacyRequest`). */
export const PLAIN_LEGACY_ROUTE: ReturnType<typeof classifyInboundRequest> = { kind: "legacy", reason: "no-claim" };

/**
 * Whether `body` is a request that `classifyInboundRequest` would route to the legacy era: a
 * JSON-RPC request by the SDK's own check, with neither `result` nor `error` (so no response
 * either), no envelope claim in its params, and no MCP-Protocol-Version header other than a legacy
 * version. The classifier tries the response schemas first, and each failed zod parse builds its
 * issues and an error: about 5 % of a broker's CPU in the subscribe-cost bench's phases, for the
 * answer this gives at the cost of the one parse that succeeds. Anything else goes to the classifier.
 */
export function isPlainLegacyRequest(body: unknown, protocolVersion: string | undefined): boolean {
  if (!isJsonObject(body) || "result" in body || "error" in body) return false;
  if (protocolVersion !== undefined && !(LEGACY_PROTOCOL_VERSIONS as readonly string[]).includes(protocolVersion.trim())) return false;
  const params = body.params;
  if (isJsonObject(params) && isJsonObject(params._meta) && PROTOCOL_VERSION_META_KEY in params._meta) return false;
  return isJSONRPCRequest(body);
}
