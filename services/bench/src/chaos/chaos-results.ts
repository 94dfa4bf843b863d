/**
 * The chaos run's results: results.json (per row: the measured value, the target, whether it was
 * met) and results.md (a summary table, then per variant its method, findings and details), in
 * the manner of the bench's. Written after every variant, so a cut-short run keeps what it measured.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fmt } from "../report/format.js";
import type { DetailTable } from "../report/result-model.js";

export interface ChaosRow {
  variant: string;
  measure: string;
  value: number | null;
  unit: string;
  /** The target as the brief states it, or null for a figure that is reported only. */
  target: string | null;
  met: boolean | null;
  note?: string;
}

export interface ChaosVariantResult {
  id: string;
  title: string;
  method: string;
  rows: ChaosRow[];
  /** Where a target is missed: by how much, which sessions and URIs, where the evidence is. */
  findings: string[];
  details: DetailTable[];
}

export interface ChaosResults {
  mode: "quick" | "full";
  command: string;
  /** The commit measured, and whether the tree had changes beyond it. */
  commit: string;
  startedAt: string;
  finishedAt: string;
  wallSeconds: number;
  machine: { cpus: number; node: string; platform: string; cpuModel: string };
  setup: string[];
  variants: ChaosVariantResult[];
}

export function writeChaosResults(dir: string, results: ChaosResults): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "results.json"), `${JSON.stringify(results, null, 2)}\n`);
  writeFileSync(join(dir, "results.md"), renderChaosMarkdown(results));
}

function renderChaosMarkdown(results: ChaosResults): string {
  const out: string[] = [];
  out.push(`# mcp-broker failover harness results (${results.mode})`, "");
  out.push(
    `\`${results.command}\`, run ${results.startedAt} → ${results.finishedAt} (${Math.round(results.wallSeconds)} s wall) on ${results.machine.cpus}× ${results.machine.cpuModel}, Node ${results.machine.node}, ${results.machine.platform}; commit ${results.commit}.`,
    "",
  );
  for (const line of results.setup) out.push(`- ${line}`);
  out.push("", "Method and definitions: [services/bench/README.md](../../README.md#failover-harness-npm-run-chaos).", "");
  out.push("## Summary", "");
  out.push("| Variant | Measure | Value | Target | Met | Note |", "|---|---|---:|---|---|---|");
  for (const variant of results.variants) for (const row of variant.rows) out.push(summaryRow(row));
  out.push("");
  for (const variant of results.variants) {
    out.push(`## ${variant.title}`, "", variant.method, "");
    if (variant.findings.length > 0) {
      out.push("**Findings**", "");
      for (const finding of variant.findings) out.push(`- ${finding}`);
      out.push("");
    }
    for (const table of variant.details) {
      out.push(`**${table.title}**`, "", `| ${table.columns.join(" | ")} |`, `|${table.columns.map(() => "---").join("|")}|`);
      for (const row of table.rows) out.push(`| ${row.map((cell) => String(cell).replace(/\|/g, "\\|")).join(" | ")} |`);
      out.push("");
    }
  }
  return `${out.join("\n")}\n`;
}

function summaryRow(row: ChaosRow): string {
  const value = row.value === null ? "—" : row.unit === "" ? fmt(row.value) : `${fmt(row.value)} ${row.unit}`;
  const met = row.met === null ? "—" : row.met ? "✅ yes" : "❌ no";
  return `| ${row.variant} | ${row.measure} | ${value} | ${row.target ?? "—"} | ${met} | ${(row.note ?? "").replace(/\|/g, "\\|")} |`;
}
