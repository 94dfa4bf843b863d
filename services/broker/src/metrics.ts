import { scrapedCounter, scrapedGauge } from "@mcp-broker/member";
import { Histogram, type Registry } from "prom-client";

/** What the broker's serving parts report at scrape time. */
export interface ServerMetricsSources {
  sessions(): { legacy: number; listen: number };
  catalogItems(): Record<string, number>;
  heldTools(): number;
  /** Backends' questions (sampling, elicitation, roots) waiting for a client's answer, and modern calls held between rounds. */
  interaction(): { questions: number; heldCalls: number };
  /** Monotonic counts since start. */
  deliveries(): { resourceUpdated: number; listChanged: number };
}

export interface ServerMetrics {
  /** Time from a backend update's arrival to its fan-out (the bus hop), once per update. */
  observeBusLatency(ms: number): void;
}

/**
 * The broker's own Prometheus metrics, beside its member's (see `createMemberMetrics`): sessions
 * and listen streams, catalog sizes, held tools, notifications out, and the bus hop's latency.
 */
export function addServerMetrics(registry: Registry, sources: ServerMetricsSources): ServerMetrics {
  scrapedGauge(registry, "mcp_broker_sessions", "Open legacy sessions and modern listen streams.", ["era"], (g) => {
    const { legacy, listen } = sources.sessions();
    g.set({ era: "legacy" }, legacy);
    g.set({ era: "modern" }, listen);
  });
  scrapedGauge(registry, "mcp_broker_catalog_items", "Items in the aggregated lists.", ["kind"], (g) => {
    for (const [kind, count] of Object.entries(sources.catalogItems())) g.set({ kind }, count);
  });
  scrapedGauge(registry, "mcp_broker_held_tools", "Tool definitions held back (toolChanges: hold / pinnedTools).", [], (g) => g.set(sources.heldTools()));
  scrapedGauge(registry, "mcp_broker_client_questions", "Backends' requests (sampling, elicitation, roots) this instance asked clients that wait for an answer.", [], (g) => g.set(sources.interaction().questions));
  scrapedGauge(registry, "mcp_broker_held_calls", "Modern clients' calls to legacy backends held between rounds of questions.", [], (g) => g.set(sources.interaction().heldCalls));
  scrapedCounter(registry, "mcp_broker_resource_updated_delivered_total", "resources/updated written to client streams.", () => sources.deliveries().resourceUpdated);
  scrapedCounter(registry, "mcp_broker_list_changed_delivered_total", "list_changed written to client streams.", () => sources.deliveries().listChanged);
  const busLatency = new Histogram({
    name: "mcp_broker_bus_latency_seconds",
    help: "From a backend update's arrival to its fan-out to sessions (the bus hop).",
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: [registry],
  });
  return { observeBusLatency: (ms) => busLatency.observe(Math.max(0, ms) / 1_000) };
}
