/**
 * The bench backend: a legacy-era (2025-11-25) MCP server (see BenchMcp) in one of two modes.
 *
 * - stdio (default): started by the broker as a stdio backend; exits when stdin closes.
 * - HTTP (env BENCH_BACKEND_TRANSPORT=http): forked by the orchestrator, serves Streamable HTTP on
 *   127.0.0.1 once asked over IPC (HttpBackendProcessApi.listen answers with its URL), one session
 *   per broker that connects; exits on `stop` or when the orchestrator goes.
 *
 * It emits nothing on its own: in both modes the orchestrator drives it through a control socket
 * (env BENCH_CONTROL_PORT, JSON lines, see BackendApi). It exits when the control socket closes.
 */
import { once } from "node:events";
import { connect } from "node:net";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import { parentLink, socketLink } from "../core/links.js";
import type { Backpressure } from "../core/paced-loop.js";
import { exitWithParent } from "../core/process-group.js";
import { serveRpc } from "../core/rpc.js";
import { BACKEND_ENV, type HttpBackendProcessApi } from "./backend-api.js";
import { BenchMcp } from "./bench-mcp.js";
import { listenHttp, WriteStalls, type HttpSessions } from "./http-sessions.js";

const bench = new BenchMcp();

function serveControl(backpressure: Backpressure): void {
  const control = connect({ host: "127.0.0.1", port: Number(process.env[BACKEND_ENV.controlPort]) });
  const link = socketLink(control);
  serveRpc(link, bench.api(backpressure));
  link.onClose(() => process.exit(0));
}

if (process.env[BACKEND_ENV.transport] === "http") {
  const stalls = new WriteStalls();
  serveControl(stalls);
  let http: HttpSessions | undefined;
  const close = async (): Promise<void> => {
    const running = http;
    http = undefined;
    await running?.close();
  };
  const api: HttpBackendProcessApi = {
    listen: async () => {
      if (http !== undefined) throw new Error("already listening");
      http = await listenHttp(bench, stalls, Number(process.env[BACKEND_ENV.sessionIdleMs] ?? 0));
      return { url: http.url };
    },
    stop: async () => {
      await close();
      setTimeout(() => process.exit(0), 20);
    },
  };
  serveRpc(parentLink(), api);
  exitWithParent(close);
} else {
  /**
   * The broker reads our stdout; when it falls behind, the pipe fills and stdout buffers. Emission
   * then waits for one `drain` instead of queueing more: the SDK transport adds a `drain` listener
   * per pending message, which turns a short stall into quadratic CPU in this process.
   */
  serveControl({
    blocked: () => process.stdout.writableNeedDrain,
    unblocked: () => once(process.stdout, "drain").then(() => undefined),
  });
  await bench.connect(new StdioServerTransport(), () => process.exit(0));
}
