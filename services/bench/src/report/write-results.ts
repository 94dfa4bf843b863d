import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { renderLatencyChart } from "./latency-chart.js";
import { renderMarkdown } from "./markdown.js";
import type { BenchResults } from "./result-model.js";

/** Writes results.json, results.md and latency.svg into `dir` (called after every scenario, so a cut-short run keeps what it measured). */
export function writeResults(dir: string, results: BenchResults): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "results.json"), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(dir, "results.md"), renderMarkdown(results));
  const series = results.scenarios.flatMap((s) => s.series ?? []);
  writeFileSync(join(dir, "latency.svg"), renderLatencyChart(series, `mcp-broker vs same-run baselines (${results.mode} run, ${results.finishedAt.slice(0, 16)})`));
}
