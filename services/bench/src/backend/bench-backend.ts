/**
 * The bench backend: a legacy-era (2025-11-25) MCP server over stdio, started by the broker as a
 * stdio backend. It serves `bench://r/{id}` (a template, so any id can be subscribed), accepts
 * `resources/subscribe` for any of them, and has one tool whose description carries a list version.
 * It emits nothing on its own: the orchestrator drives it through a control socket
 * (env BENCH_CONTROL_PORT, JSON lines, see BackendApi). It exits when stdin or the control socket closes.
 */
import { once } from "node:events";
import { connect } from "node:net";
import { McpServer, ResourceTemplate } from "@modelcontextprotocol/server";
import { StdioServerTransport } from "@modelcontextprotocol/server/stdio";
import { backendUri, keyOf, LIST_VERSION_TOOL, listVersionMarker, RESOURCE_TEMPLATE, updateUri, type EmitPlan } from "../core/bench-uris.js";
import { nowMicros } from "../core/clock.js";
import { socketLink } from "../core/links.js";
import { pacedLoop } from "../core/paced-loop.js";
import { sampleUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import type { BackendApi, BackendCounters } from "./backend-api.js";

/** List changes are announced by the storm loop itself, exactly once per change. */
class QuietMcpServer extends McpServer {
  override sendToolListChanged(): void {}
  override sendResourceListChanged(): void {}
  override sendPromptListChanged(): void {}
}

const counters: BackendCounters = { subscribe: 0, unsubscribe: 0, toolsListReloads: 0 };
let listVersion = 0;

const mcp = new QuietMcpServer(
  { name: "bench-backend", version: "1.0.0" },
  { capabilities: { resources: { subscribe: true, listChanged: true }, tools: { listChanged: true } } },
);
mcp.registerResource("r", new ResourceTemplate(RESOURCE_TEMPLATE, { list: undefined }), { mimeType: "text/plain" }, (uri) => ({
  contents: [{ uri: uri.href, mimeType: "text/plain", text: "bench" }],
}));
const versionTool = mcp.registerTool(LIST_VERSION_TOOL, { description: listVersionMarker(listVersion) }, () => ({
  content: [{ type: "text", text: listVersionMarker(listVersion) }],
}));
mcp.server.setRequestHandler("resources/subscribe", () => {
  counters.subscribe++;
  return {};
});
mcp.server.setRequestHandler("resources/unsubscribe", () => {
  counters.unsubscribe++;
  return {};
});

const emitUpdate = (uri: string): void => {
  mcp.server.sendResourceUpdated({ uri }).catch(() => undefined);
};

/**
 * The broker reads our stdout; when it falls behind, the pipe fills and stdout buffers. Emission
 * then waits for one `drain` instead of queueing more: the SDK transport adds a `drain` listener
 * per pending message, which turns a short stall into quadratic CPU in this process.
 */
const stdoutBackpressure = {
  blocked: () => process.stdout.writableNeedDrain,
  unblocked: () => once(process.stdout, "drain").then(() => undefined),
};

const api: BackendApi = {
  emit: (plan: EmitPlan) =>
    pacedLoop(plan.rate, plan.count, (i) => emitUpdate(updateUri(backendUri(keyOf(plan, i)), plan.step, i, nowMicros())), stdoutBackpressure),
  listStorm: async ({ count, durationMs }) => {
    let firstMicros = 0;
    let lastMicros = 0;
    const result = await pacedLoop(
      (count * 1000) / durationMs,
      count,
      () => {
        listVersion++;
        versionTool.update({ description: listVersionMarker(listVersion) });
        lastMicros = nowMicros();
        if (firstMicros === 0) firstMicros = lastMicros;
        mcp.server.sendToolListChanged().catch(() => undefined);
      },
      stdoutBackpressure,
    );
    return { emitted: result.emitted, firstMicros, lastMicros, finalVersion: listVersion };
  },
  counters: () => ({ ...counters }),
  resetCounters: () => {
    counters.subscribe = counters.unsubscribe = counters.toolsListReloads = 0;
  },
  usage: ({ gc }) => sampleUsage(gc),
};

const port = Number(process.env.BENCH_CONTROL_PORT);
const control = connect({ host: "127.0.0.1", port });
const link = socketLink(control);
serveRpc(link, api);
link.onClose(() => process.exit(0));

const transport = new StdioServerTransport();
await mcp.connect(transport);
mcp.server.onclose = () => process.exit(0);
// Count list reloads as they arrive (McpServer owns the tools/list handler).
const deliver = transport.onmessage;
transport.onmessage = (message) => {
  if ("method" in message && message.method === "tools/list" && "id" in message && message.params?.cursor === undefined) counters.toolsListReloads++;
  deliver?.(message);
};
