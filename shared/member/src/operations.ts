import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { localhostAllowedHostnames, validateHostHeader } from "@modelcontextprotocol/server";
import type { Registry } from "prom-client";
import type { Logger } from "./logger.js";

/**
 * The Host check (DNS rebinding) of every member's HTTP face: localhost names and
 * `server.allowedHosts` (`"*"`: any). `/readyz` and `/metrics` name backends and their failures,
 * which are not for a rebinding page to read.
 */
export class HostCheck {
  private readonly hosts: string[] | "any";
  /**
   * Host header values that passed, as sent (at most `PASSED_HOSTS`): a client sends the same one
   * with every request, and the SDK's check parses it as a URL each time (~1.6 % of a broker's
   * CPU in the subscribe bench's phases). A value that fails is checked again each time; none is remembered.
   */
  private readonly passed = new Set<string>();

  constructor(allowedHosts: readonly string[]) {
    this.hosts = allowedHosts.includes("*") ? "any" : [...localhostAllowedHostnames(), ...allowedHosts];
  }

  check(req: IncomingMessage): { ok: true } | { ok: false; status: 403; message: string } {
    if (this.hosts === "any") return HOST_OK;
    const header = req.headers.host;
    if (header !== undefined && this.passed.has(header)) return HOST_OK;
    const host = validateHostHeader(header, this.hosts);
    if (!host.ok) return { ok: false, status: 403, message: host.message };
    if (header !== undefined && this.passed.size < PASSED_HOSTS) this.passed.add(header);
    return HOST_OK;
  }
}

const HOST_OK = { ok: true } as const;
const PASSED_HOSTS = 64;

/** What `/readyz` says: 200 when `ready`, else 503; `status` and the rest as given. */
export interface ReadinessReport {
  ready: boolean;
  status: string;
  [field: string]: unknown;
}

export interface OperationsDeps {
  report: () => ReadinessReport;
  metrics: Registry;
  hostCheck: Pick<HostCheck, "check">;
  logger: Logger;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const payload = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(payload), ...headers });
  res.end(payload);
}

/**
 * `/healthz` (the process is up; no Host check, for any prober), `/readyz` and `/metrics`
 * (Prometheus) behind the Host check. Returns false for any other path (not answered).
 */
export function serveOperations(req: IncomingMessage, res: ServerResponse, deps: OperationsDeps): boolean {
  const path = (req.url ?? "/").split("?")[0];
  if (path !== "/healthz" && path !== "/readyz" && path !== "/metrics") return false;
  req.resume();
  if (req.method !== "GET") {
    sendJson(res, 405, { error: `Method ${req.method ?? "?"} not allowed; use GET.` }, { allow: "GET" });
    return true;
  }
  if (path === "/healthz") {
    sendJson(res, 200, { status: "ok" });
    return true;
  }
  const host = deps.hostCheck.check(req);
  if (!host.ok) {
    sendJson(res, host.status, { error: host.message });
    return true;
  }
  if (path === "/metrics") {
    deps.metrics.metrics().then(
      (text) => res.writeHead(200, { "content-type": deps.metrics.contentType }).end(text),
      (error: unknown) => {
        deps.logger.error({ err: error }, "metrics collection failed");
        sendJson(res, 500, { error: "metrics collection failed" });
      },
    );
    return true;
  }
  const { ready, ...report } = deps.report();
  sendJson(res, ready ? 200 : 503, report);
  return true;
}

/** A member's own small HTTP port (the worker's): `/healthz`, `/readyz`, `/metrics`, nothing else. */
export function createOperationsServer(deps: OperationsDeps): Server {
  return createServer((req, res) => {
    if (!serveOperations(req, res, deps)) {
      req.resume();
      sendJson(res, 404, { error: "Not found: this member serves /healthz, /readyz and /metrics only." });
    }
  });
}
