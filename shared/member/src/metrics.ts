import type { JobOutcome, JobStats } from "@mcp-broker/shared";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";

/** What a member's parts report at scrape time (plain numbers, so the hot paths only add to a field). */
export interface MemberMetricsSources {
  backends(): readonly { id: string; state: string; readiness: string }[];
  upstreamSubscriptions(backendId: string): number;
  /** Whether this member is the cluster's watcher of the backend (always, with the memory engine, while it is connected). */
  watching(backendId: string): boolean;
  /** Monotonic counts since start. */
  counts(): { updatesIn: number; reloads: number; countRepairs: number };
  /** The cluster's job queue by state (the whole cluster's, on the Redis engine). */
  jobs(): Promise<JobStats>;
}

export interface MemberMetrics {
  readonly registry: Registry;
  /** One run of a job by this member. */
  observeJob(run: { key: string; outcome: JobOutcome; durationMs: number }): void;
}

/** A gauge set from `collect` at each scrape. */
export function scrapedGauge(registry: Registry, name: string, help: string, labelNames: string[], collect: (g: Gauge) => void): Gauge {
  return new Gauge({ name, help, labelNames, registers: [registry], collect() { this.reset(); collect(this); } });
}

/** A counter that follows a monotonic count read at each scrape. */
export function scrapedCounter(registry: Registry, name: string, help: string, read: () => number): Counter {
  let reported = 0;
  return new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      const now = read();
      this.inc(now - reported);
      reported = now;
    },
  });
}

/**
 * A member's Prometheus metrics: backends up, degraded and watched, upstream subscriptions, updates
 * in, list reloads and count repairs run here, the cluster's jobs by state, this member's job runs
 * and their durations, and Node's process metrics. The broker adds its own to the same registry.
 */
export function createMemberMetrics(sources: MemberMetricsSources): MemberMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "mcp_broker_" });
  scrapedGauge(registry, "mcp_broker_backend_up", "1 when the backend is connected, else 0.", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, b.state === "connected" ? 1 : 0);
  });
  // Apart from backend_up, which stays about the connection: a degraded backend is up, and its items stay listed.
  scrapedGauge(registry, "mcp_broker_backend_degraded", "1 when the backend is connected but stopped answering (a health probe or several requests in a row timed out), else 0.", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, b.readiness === "degraded" ? 1 : 0);
  });
  scrapedGauge(registry, "mcp_broker_upstream_subscriptions", "Resources watched upstream (one per backend resource, however many subscribers).", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, sources.upstreamSubscriptions(b.id));
  });
  scrapedGauge(registry, "mcp_broker_backend_watching", "1 when this member watches the backend upstream for the cluster (holds its watcher lease), else 0.", ["backend"], (g) => {
    for (const b of sources.backends()) g.set({ backend: b.id }, sources.watching(b.id) ? 1 : 0);
  });
  scrapedCounter(registry, "mcp_broker_resource_updates_received_total", "resources/updated from backends (for watched resources).", () => sources.counts().updatesIn);
  scrapedCounter(registry, "mcp_broker_list_reloads_total", "Backend list reloads this member ran (reload jobs completed).", () => sources.counts().reloads);
  scrapedCounter(registry, "mcp_broker_subscription_count_repairs_total", "Subscription counts (per principal, total) the audit job found drifted and repaired on this member.", () => sources.counts().countRepairs);
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
    observeJob: ({ key, outcome, durationMs }) => {
      const type = key.split(":", 1)[0] ?? key;
      jobRuns.inc({ type, outcome });
      jobDuration.observe({ type }, Math.max(0, durationMs) / 1_000);
    },
  };
}
