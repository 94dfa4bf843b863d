import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import { serveOperations, type BackendStatus, type HeldTool, type Logger } from "@mcp-broker/member";
import { jsonRpcCode } from "@mcp-broker/shared";
import type { Registry } from "prom-client";
import { serveConsole, type ConsoleAccess, type ConsoleData } from "./console-api.js";
import type { EdgeSecurity } from "./edge-security.js";
import { connectionHeader, isHttp2, serveH2cBeside } from "./h2c.js";
import type { McpEndpoint } from "./mcp-endpoint.js";
import { sendJson } from "./mcp-endpoint.js";
import type { StartupGate } from "./startup-gate.js";

/** What `/readyz` reports of this broker. */
export interface BrokerStatus {
  engine: string;
  instance: string;
  /** `listed`: every list of the backend is loaded (a connected backend without is not served yet). */
  backends: (BackendStatus & { listed: boolean })[];
  /** The member is ready: every backend connected and answering. */
  ready: boolean;
  collisions: readonly string[];
  heldTools: readonly HeldTool[];
}

/**
 * The broker's HTTP face: `/mcp`, `/healthz` (process up, says nothing else), `/readyz` (serving,
 * and every backend connected and answering) and `/metrics` (Prometheus); the last two behind the
 * Host check, as they name backends and their failures. All but `/mcp` answer from the moment the
 * port is bound; `/mcp` requests wait at `gate` until the broker serves.
 */
export function createHttpServer(deps: {
  endpoint: McpEndpoint;
  gate: StartupGate;
  security: EdgeSecurity;
  status: () => BrokerStatus;
  metrics: Registry;
  logger: Logger;
  requestTimeoutMs: number;
  /** The operator console's API (`console.enabled`); absent: `/console` is not served. */
  console?: { access: ConsoleAccess; data: ConsoleData };
  /** `/mcp` requests before the gate opens: held there, or refused with 503 (see `server.whileStarting`). */
  whileStarting?: "hold" | "refuse";
  /** Also serve HTTP/2 without TLS on the port (`server.http2`, see `serveH2cBeside`). */
  http2?: boolean;
  mcpPath?: string;
}): Server {
  const mcpPath = deps.mcpPath ?? "/mcp";
  // A modern request's Mcp-Name repeats its URI (up to MAX_URI_BYTES, Base64-encoded when not ASCII:
  // ~22 KB), and Node's default allows 16 KB for all of a request's headers: it answered 431.
  const MAX_HEADER_BYTES = 64 * 1024;
  // Timeouts are checked on this period (Node's default is 30 s, far coarser than the timeout).
  const connectionsCheckingInterval = Math.max(50, Math.min(5_000, Math.floor(deps.requestTimeoutMs / 4)));
  const handleMcp = (req: IncomingMessage, res: ServerResponse): void => {
    deps.endpoint.handle(req, res).catch((error: unknown) => {
      deps.logger.error({ err: error }, "unhandled error in the MCP endpoint");
      if (!res.headersSent) sendJson(res, 500, { jsonrpc: "2.0", id: null, error: { code: -32603, message: "Internal error" } });
      else res.end();
    });
  };
  const operations = {
    metrics: deps.metrics,
    hostCheck: { check: (req: IncomingMessage) => deps.security.checkHost(req) },
    logger: deps.logger,
    report: () => {
      const { ready: memberReady, collisions, heldTools, ...status } = deps.status();
      const ready = deps.gate.state === "open" && memberReady;
      return {
        ready,
        status: ready ? "ready" : deps.gate.state === "holding" ? "starting" : "degraded",
        ...status,
        ...(collisions.length > 0 && { collisions }),
        ...(heldTools.length > 0 && { heldTools }),
      };
    },
  };
  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === mcpPath) {
      if (deps.gate.state === "open") handleMcp(req, res);
      else if (deps.gate.state === "closed") refuse(req, res, "This broker instance is stopping; retry (through the load balancer, another instance answers).", true);
      else if (deps.whileStarting === "refuse") refuse(req, res, "This broker instance is starting and does not serve yet; retry (through the load balancer, another instance answers).");
      // Held while the broker starts; dropped if it shuts down first (its connection ends with the rest).
      else void deps.gate.pass().then((open) => (open ? handleMcp(req, res) : res.destroy()));
      return;
    }
    if (serveOperations(req, res, operations)) return;
    if (deps.console !== undefined && serveConsole(req, res, deps.console.access, deps.console.data)) return;
    req.resume();
    sendJson(res, 404, { error: `Not found: the MCP endpoint is ${mcpPath}` });
  };
  const server = createServer({ connectionsCheckingInterval, maxHeaderSize: MAX_HEADER_BYTES }, handle);
  // Both bound receiving the request only (a slow-trickle body gets 408), not the response:
  // SSE responses stay open as long as they like.
  server.requestTimeout = deps.requestTimeoutMs;
  server.headersTimeout = Math.min(deps.requestTimeoutMs, 30_000);
  if (deps.http2 === true) {
    const h2c = serveH2cBeside(server, handle, { sniffTimeoutMs: server.headersTimeout, requestTimeoutMs: server.requestTimeout, idleTimeoutMs: server.keepAliveTimeout });
    // The broker's stop ends every connection with this: the HTTP/2 ones too.
    const closeHttp1 = server.closeAllConnections.bind(server);
    server.closeAllConnections = () => {
      closeHttp1();
      h2c.closeAll();
    };
  }
  return server;
}

/**
 * A request that reached a broker still starting, or stopping, refused before anything is read or
 * done: a load balancer that retries on 503 sends it to another instance at once, where holding it
 * would keep a reconnecting client waiting until this one serves. A stopping one also closes the
 * connection, so that a client's next request opens one to another instance.
 */
function refuse(req: IncomingMessage, res: ServerResponse, message: string, stopping = false): void {
  req.resume();
  sendJson(res, 503, { jsonrpc: "2.0", id: null, error: { code: jsonRpcCode("STARTING", "legacy"), message } }, { "retry-after": "1", ...(stopping && connectionHeader(req, "close")) });
  // HTTP/2's way of saying so: GOAWAY (the streams under way finish; new ones go to a new connection).
  if (stopping && isHttp2(req)) (req as unknown as Http2ServerRequest).stream.session?.close();
}
