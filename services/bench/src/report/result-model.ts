/** One figure of one scenario, broker next to its same-run baseline. */
export interface ResultRow {
  /** Scenario number and name, e.g. "1. Unicast". */
  scenario: string;
  engine: "memory" | "redis" | "redis-cluster" | "n/a";
  measure: string;
  unit: string;
  broker: number | null;
  baseline: number | null;
  /** broker ÷ baseline. */
  ratio: number | null;
  /** The target as stated in the issue, or null when the row is informative. */
  target: string | null;
  met: boolean | null;
  status: "measured" | "not run";
  /** Why not run, or what limited the figure. */
  note?: string;
  /** CPU of the load generators (and the broker) during the broker's measurement, e.g. "gens 13%+12% · broker 93%". */
  cpu?: string;
}

/** A detail table (per rate step, per phase…). */
export interface DetailTable {
  title: string;
  columns: string[];
  rows: (string | number)[][];
}

export interface ScenarioResult {
  id: string;
  title: string;
  /** How it was measured, in a sentence or two. */
  method: string;
  rows: ResultRow[];
  details: DetailTable[];
  /** Where the broker falls short: by how much and why (filled from the run's own figures). */
  findings: string[];
  /** Series for the latency chart. */
  series?: ChartSeries[];
}

export interface ChartSeries {
  chart: "unicast" | "hot-uri";
  label: string;
  /** [offered load, latency ms] */
  points: [number, number][];
}

export interface BenchResults {
  mode: "quick" | "full";
  startedAt: string;
  finishedAt: string;
  wallSeconds: number;
  machine: { cpus: number; node: string; platform: string; cpuModel: string };
  setup: string[];
  scenarios: ScenarioResult[];
}

/** broker ÷ baseline; null when either is missing or not finite, or the baseline is 0. */
export function ratio(broker: number | null, baseline: number | null): number | null {
  if (broker === null || baseline === null || !Number.isFinite(broker) || !Number.isFinite(baseline) || baseline === 0) return null;
  return broker / baseline;
}

export function notRun(scenario: string, engine: ResultRow["engine"], measure: string, unit: string, target: string | null, reason: string): ResultRow {
  return { scenario, engine, measure, unit, broker: null, baseline: null, ratio: null, target, met: null, status: "not run", note: reason };
}
