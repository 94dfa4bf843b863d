/**
 * The MCP side of the bench backend, the same over stdio and HTTP: one McpServer per connection
 * (stdio: the one broker; HTTP: one per broker session), each serving `bench://r/{id}` (a template,
 * so any id can be subscribed) and one tool whose description carries a list version. Every
 * connection keeps its own subscriptions, and an update of `bench://r/<k>/…` goes to exactly the
 * connections subscribed to `bench://r/<k>`: a connection that never subscribed gets nothing.
 */
import { McpServer, ResourceTemplate, type RegisteredTool, type Transport } from "@modelcontextprotocol/server";
import { backendUri, keyOf, LIST_VERSION_TOOL, listVersionMarker, RESOURCE_TEMPLATE, updateUri, type EmitPlan } from "../core/bench-uris.js";
import { nowMicros } from "../core/clock.js";
import { pacedLoop, type Backpressure } from "../core/paced-loop.js";
import { reportUsage } from "../core/process-usage.js";
import type { BackendApi, BackendCounters, ListStormChange } from "./backend-api.js";

/** List changes are announced by the storm loop itself, exactly once per change. */
class QuietMcpServer extends McpServer {
  override sendToolListChanged(): void {}
  override sendResourceListChanged(): void {}
  override sendPromptListChanged(): void {}
}

/**
 * Writes a `resources/updated` notification straight onto the connection's open notification
 * stream, returning false when there is none (then the SDK sends it). HTTP only; see http-sessions.ts.
 */
export type DirectUpdates = (notification: string) => boolean;

interface Connection {
  readonly mcp: QuietMcpServer;
  readonly direct: DirectUpdates | undefined;
  readonly versionTool: RegisteredTool;
  /** Resource URIs this connection subscribed to. */
  readonly subscribed: Set<string>;
  /** Its `tools/list` calls without a cursor since the last reset. */
  toolsListReloads: number;
}

export class BenchMcp {
  private readonly counters: BackendCounters = { subscribe: 0, unsubscribe: 0, toolsListReloads: 0, toolsListReloadMicros: [] };
  private listVersion = 0;
  /** Delay of `tools/list` answers (listDelay), ms. */
  private listDelayMs = 0;
  private readonly connections = new Set<Connection>();
  /** The last emission with `record`: per update, when it was emitted and to how many connections. */
  private emitted: { micros: Float64Array; targets: Uint8Array } | undefined;
  /** Resource URI → the connections subscribed to it. */
  private readonly subscribers = new Map<string, Set<Connection>>();

  /**
   * Serves a new connection on `transport` (its own McpServer). `onClose` runs once the connection
   * is over (transport closed, HTTP session deleted); its subscriptions are gone by then.
   */
  async connect(transport: Transport, onClose: () => void, direct?: DirectUpdates): Promise<McpServer> {
    const mcp = new QuietMcpServer(
      { name: "bench-backend", version: "1.0.0" },
      { capabilities: { resources: { subscribe: true, listChanged: true }, tools: { listChanged: true } } },
    );
    mcp.registerResource("r", new ResourceTemplate(RESOURCE_TEMPLATE, { list: undefined }), { mimeType: "text/plain" }, (uri) => ({
      contents: [{ uri: uri.href, mimeType: "text/plain", text: "bench" }],
    }));
    const versionTool = mcp.registerTool(LIST_VERSION_TOOL, { description: listVersionMarker(this.listVersion) }, () => ({
      content: [{ type: "text", text: listVersionMarker(this.listVersion) }],
    }));
    const connection: Connection = { mcp, direct, versionTool, subscribed: new Set(), toolsListReloads: 0 };
    mcp.server.setRequestHandler("resources/subscribe", (request) => {
      this.counters.subscribe++;
      this.subscribe(connection, request.params.uri);
      return {};
    });
    mcp.server.setRequestHandler("resources/unsubscribe", (request) => {
      this.counters.unsubscribe++;
      this.unsubscribe(connection, request.params.uri);
      return {};
    });
    mcp.server.onclose = () => {
      this.connections.delete(connection);
      for (const uri of [...connection.subscribed]) this.unsubscribe(connection, uri);
      onClose();
    };
    this.connections.add(connection);
    await mcp.connect(transport);
    // Count list reloads as they arrive, and hold them back under listDelay (McpServer owns the tools/list handler).
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      if ("method" in message && message.method === "tools/list" && "id" in message) {
        if (message.params?.cursor === undefined) {
          this.counters.toolsListReloads++;
          if (this.counters.toolsListReloadMicros.length < 100) this.counters.toolsListReloadMicros.push(nowMicros());
          connection.toolsListReloads++;
        }
        if (this.listDelayMs > 0) {
          setTimeout(() => deliver?.(message, extra), this.listDelayMs);
          return;
        }
      }
      deliver?.(message, extra);
    };
    return mcp;
  }

  /** The control API; emission waits while `backpressure` says the connections' sink is full. */
  api(backpressure: Backpressure): BackendApi {
    return {
      emit: (plan: EmitPlan) => {
        this.emitted = plan.record === true ? { micros: new Float64Array(plan.count), targets: new Uint8Array(plan.count) } : undefined;
        return pacedLoop(plan.rate, plan.count, (i) => this.emitUpdate(backendUri(keyOf(plan, i)), plan.step, i), backpressure);
      },
      emitLog: ({ from, count }) => {
        const log = this.emitted;
        if (log === undefined) return { micros: [], targets: [] };
        const end = Math.min(log.micros.length, from + count);
        return { micros: Array.from(log.micros.subarray(from, end)), targets: Array.from(log.targets.subarray(from, end)) };
      },
      listStorm: async ({ count, durationMs, change = "each" }) => {
        let firstMicros = 0;
        let lastMicros = 0;
        let changedMicros = 0;
        const result = await pacedLoop(
          (count * 1000) / durationMs,
          count,
          (i) => {
            if (isRealChange(change, i, count)) {
              this.listVersion++;
              for (const { versionTool } of this.connections) versionTool.update({ description: listVersionMarker(this.listVersion) });
              changedMicros = nowMicros();
            }
            lastMicros = nowMicros();
            if (firstMicros === 0) firstMicros = lastMicros;
            for (const { mcp } of this.connections) mcp.server.sendToolListChanged().catch(() => undefined);
          },
          backpressure,
        );
        return { emitted: result.emitted, firstMicros, lastMicros, changedMicros, finalVersion: this.listVersion };
      },
      listDelay: ({ ms }) => {
        this.listDelayMs = ms;
      },
      counters: () => ({ ...this.counters, toolsListReloadMicros: [...this.counters.toolsListReloadMicros] }),
      census: () => ({ subscriptions: [...this.connections].map((c) => c.subscribed.size), toolsListReloads: [...this.connections].map((c) => c.toolsListReloads) }),
      resetCounters: () => {
        this.counters.subscribe = this.counters.unsubscribe = this.counters.toolsListReloads = 0;
        this.counters.toolsListReloadMicros = [];
        for (const connection of this.connections) connection.toolsListReloads = 0;
      },
      usage: reportUsage,
    };
  }

  /** Ends every connection. */
  async close(): Promise<void> {
    await Promise.all([...this.connections].map(({ mcp }) => mcp.close().catch(() => undefined)));
  }

  /** `resources/updated` for a sub-resource of `base` (the URI carries step, seq and emit time), to the subscribers of `base`. */
  private emitUpdate(base: string, step: number, seq: number): void {
    const targets = this.subscribers.get(base);
    const at = nowMicros();
    if (this.emitted !== undefined) {
      this.emitted.micros[seq] = at;
      this.emitted.targets[seq] = Math.min(255, targets?.size ?? 0);
    }
    if (targets === undefined) return;
    const uri = updateUri(base, step, seq, at);
    const notification = JSON.stringify({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri } });
    for (const { mcp, direct } of targets) {
      if (direct?.(notification) !== true) mcp.server.sendResourceUpdated({ uri }).catch(() => undefined);
    }
  }

  private subscribe(connection: Connection, uri: string): void {
    connection.subscribed.add(uri);
    let set = this.subscribers.get(uri);
    if (set === undefined) {
      set = new Set();
      this.subscribers.set(uri, set);
    }
    set.add(connection);
  }

  private unsubscribe(connection: Connection, uri: string): void {
    connection.subscribed.delete(uri);
    const set = this.subscribers.get(uri);
    set?.delete(connection);
    if (set?.size === 0) this.subscribers.delete(uri);
  }
}

/** Whether notification `i` of a storm of `count` follows a real change of the tool list. */
function isRealChange(change: ListStormChange, i: number, count: number): boolean {
  return change === "each" || i === count - 1;
}
