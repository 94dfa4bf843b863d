import type { JobOutcome, JobStats } from "@mcp-broker/shared";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";

/** What the broker's parts report at scrape time (plain numbers, so the hot paths only add to a field). */
export interface MetricsSources {
  sessions(): { legacy: number; listen: number };
  backends(): readonly { id: string; state: string; readiness: string }[];
  upstreamSubscriptions(backendId: string): number;
  catalogItems(): Record<string, number>;
  heldTools(): number;
  /** Whether this instance is the cluster's watcher of the backend (always, with the memory engine, while it is connected). */
  watching(backendId: string): boolean;
  /** Monotonic counts since start. */
  counts(): { updatesIn: number; resourceDeliveries: number; listChangedDeliveries: number; reloads: number; countRepairs: number };
  /** The cluster's job queue by state (the whole cluster's, on the Redis engine). */
  jobs(): Promise<JobStats>;
}

export interface BrokerMetrics {
  readonly registry: Registry;
  /** Time from a backend update's arrival to its fan-out (the bus hop), once per update. */
  observeBusLatency(ms: number): void;
  /** One run of a job by this member. */
  observeJob(run: { key: string; outcome: JobOutcome; durationMs: number }): void;
}

/**
 * Prometheus metrics (`GET /metrics`): sessions and listen streams, backends up, degraded and watched, upstream
 * subscriptions, catalog sizes, held tools, updates in, notifications out, list reloads, the bus
 * hop's latency, and Node's process metrics. Gauges and counters are read at scrape time.
 */
export function createMetrics(sources: MetricsSources): BrokerMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "mcp_broker_" });
  const gauge = (name: string, help: string, labelNames: string[], collect: (g: Gauge) => void) =>
    new Gauge({ name, help, labelNames, registers: [registry], collect() { this.reset(); collect(this); } });
  gauge("mcp_broker_sessions", "Open legacy sessions and modern listen streams.", ["era"], (g) => {
    const { legacy, listen } = sources.sessions();
    g.set({ era: "legacy" }, legacy);
    g.set({ era: "modern" }, listen);
  });
  gauge("mcp_broker_backend_up", "1 when the backend is connected, else 0.", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, b.state === "connected" ? 1 : 0);
  });
  // Apart from backend_up, which stays about the connection: a degraded backend is up, and its items stay listed.
  gauge("mcp_broker_backend_degraded", "1 when the backend is connected but stopped answering (a health probe or several requests in a row timed out), else 0.", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, b.readiness === "degraded" ? 1 : 0);
  });
  gauge("mcp_broker_upstream_subscriptions", "Resources watched upstream (one per backend resource, however many subscribers).", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, sources.upstreamSubscriptions(b.id));
  });
  gauge("mcp_broker_backend_watching", "1 when this instance watches the backend upstream for the cluster (holds its watcher lease), else 0.", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, sources.watching(b.id) ? 1 : 0);
  });
  gauge("mcp_broker_catalog_items", "Items in the aggregated lists.", ["kind"], (g) => {
    for (const [kind, count] of Object.entries(sources.catalogItems())) g.set({ kind }, count);
  });
  gauge("mcp_broker_held_tools", "Tool definitions held back (toolChanges: hold / pinnedTools).", [], (g) => g.set(sources.heldTools()));
  const counter = (name: string, help: string, read: (c: ReturnType<MetricsSources["counts"]>) => number) => {
    let reported = 0;
    return new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        const now = read(sources.counts());
        this.inc(now - reported);
        reported = now;
      },
    });
  };
  counter("mcp_broker_resource_updates_received_total", "resources/updated from backends (for watched resources).", (c) => c.updatesIn);
  counter("mcp_broker_resource_updated_delivered_total", "resources/updated written to client streams.", (c) => c.resourceDeliveries);
  counter("mcp_broker_list_changed_delivered_total", "list_changed written to client streams.", (c) => c.listChangedDeliveries);
  counter("mcp_broker_subscription_count_repairs_total", "Subscription counts (per principal, total) the audit job found drifted and repaired on this member.", (c) => c.countRepairs);
  counter("mcp_broker_list_reloads_total", "Backend list reloads this member ran (reload jobs completed).", (c) => c.reloads);
  const busLatency = new Histogram({
    name: "mcp_broker_bus_latency_seconds",
    help: "From a backend update's arrival to its fan-out to sessions (the bus hop).",
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers: [registry],
  });
  new Gauge({
    name: "mcp_broker_jobs",
    help: "The cluster's jobs by state: waiting, delayed, active; failed and completed as retained (the newest 1000 and 100).",
    labelNames: ["state"],
    registers: [registry],
    async collect() {
      this.reset();
      try {
        const stats: JobStats = await sources.jobs();
        for (const [state, count] of Object.entries(stats) as [string, number][]) this.set({ state }, count);
      } catch {
        // Redis away: no figure rather than a wrong one.
      }
    },
  });
  const jobRuns = new Counter({ name: "mcp_broker_job_runs_total", help: "Job runs by this member, by job type and outcome (completed, retry, failed).", labelNames: ["type", "outcome"], registers: [registry] });
  const jobDuration = new Histogram({
    name: "mcp_broker_job_duration_seconds",
    help: "How long this member's job runs took, by job type.",
    labelNames: ["type"],
    buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30],
    registers: [registry],
  });
  return {
    registry,
    observeBusLatency: (ms) => busLatency.observe(Math.max(0, ms) / 1_000),
    observeJob: ({ key, outcome, durationMs }) => {
      const type = key.split(":", 1)[0] ?? key;
      jobRuns.inc({ type, outcome });
      jobDuration.observe({ type }, Math.max(0, durationMs) / 1_000);
    },
  };
}
