import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Registry } from "prom-client";
import type { Catalog } from "../catalog/catalog.js";
import type { HeldTool } from "../catalog/tool-gate.js";
import type { Logger } from "../logger.js";
import type { BackendPool } from "../upstream/backend-pool.js";
import type { EdgeSecurity } from "./edge-security.js";
import type { McpEndpoint } from "./mcp-endpoint.js";
import { sendJson } from "./mcp-endpoint.js";
import type { StartupGate } from "./startup-gate.js";

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
  pool: BackendPool;
  catalog: Catalog;
  heldTools: () => readonly HeldTool[];
  /** Which engine runs, this instance's id, and whether it is the cluster's watcher of a backend. */
  cluster: { engine: string; instanceId: string; watching(backendId: string): boolean };
  metrics: Registry;
  logger: Logger;
  requestTimeoutMs: number;
  mcpPath?: string;
}): Server {
  const mcpPath = deps.mcpPath ?? "/mcp";
  // Timeouts are checked on this period (Node's default is 30 s, far coarser than the timeout).
  const connectionsCheckingInterval = Math.max(50, Math.min(5_000, Math.floor(deps.requestTimeoutMs / 4)));
  const handleMcp = (req: IncomingMessage, res: ServerResponse): void => {
    deps.endpoint.handle(req, res).catch((error: unknown) => {
      deps.logger.error({ err: error }, "unhandled error in the MCP endpoint");
      if (!res.headersSent) sendJson(res, 500, { jsonrpc: "2.0", id: null, error: { code: -32603, message: "Internal error" } });
      else res.end();
    });
  };
  const server = createServer({ connectionsCheckingInterval }, (req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === mcpPath) {
      if (deps.gate.state === "open") handleMcp(req, res);
      // Held while the broker starts; dropped if it shuts down first (its connection ends with the rest).
      else void deps.gate.pass().then((open) => (open ? handleMcp(req, res) : res.destroy()));
      return;
    }
    req.resume();
    if (path === "/healthz" && req.method === "GET") {
      sendJson(res, 200, { status: "ok" });
      return;
    }
    if (path === "/metrics" || path === "/readyz") {
      // They name backends and their failures: not for a rebinding page to read.
      const host = deps.security.checkHost(req);
      if (!host.ok) {
        sendJson(res, host.status, { error: host.message });
        return;
      }
    }
    if (path === "/metrics" && req.method === "GET") {
      deps.metrics.metrics().then(
        (text) => res.writeHead(200, { "content-type": deps.metrics.contentType }).end(text),
        (error: unknown) => {
          deps.logger.error({ err: error }, "metrics collection failed");
          sendJson(res, 500, { error: "metrics collection failed" });
        },
      );
      return;
    }
    if (path === "/readyz" && req.method === "GET") {
      const backends = deps.pool.all().map((b) => ({
        id: b.id,
        state: b.readiness,
        ...(b.era !== undefined && { era: b.era }),
        ...(b.lastFailure !== undefined && { lastFailure: b.lastFailure }),
        watching: deps.cluster.watching(b.id),
      }));
      const ready = deps.gate.state === "open" && deps.pool.ready();
      const collisions = deps.catalog.collisions();
      const heldTools = deps.heldTools();
      sendJson(res, ready ? 200 : 503, {
        status: ready ? "ready" : deps.gate.state === "holding" ? "starting" : "degraded",
        engine: deps.cluster.engine,
        instance: deps.cluster.instanceId,
        backends,
        ...(collisions.length > 0 && { collisions }),
        ...(heldTools.length > 0 && { heldTools }),
      });
      return;
    }
    sendJson(res, 404, { error: `Not found: the MCP endpoint is ${mcpPath}` });
  });
  // Both bound receiving the request only (a slow-trickle body gets 408), not the response:
  // SSE responses stay open as long as they like.
  server.requestTimeout = deps.requestTimeoutMs;
  server.headersTimeout = Math.min(deps.requestTimeoutMs, 30_000);
  return server;
}
