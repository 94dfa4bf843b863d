import type { BenchResults, DetailTable, ResultRow } from "./result-model.js";
import { fmt, fmtRatio } from "./format.js";

/** results.md: the summary table of every row, then per scenario its method, findings and details. */
export function renderMarkdown(results: BenchResults): string {
  const out: string[] = [];
  out.push(`# mcp-broker benchmark results (${results.mode})`, "");
  out.push(
    `Run ${results.startedAt} → ${results.finishedAt} (${Math.round(results.wallSeconds)} s wall) on ${results.machine.cpus}× ${results.machine.cpuModel}, Node ${results.machine.node}, ${results.machine.platform}.`,
    "",
  );
  for (const line of results.setup) out.push(`- ${line}`);
  out.push("", "Ratios are broker ÷ baseline, both measured in this run; for throughput a higher ratio is better, for latency and memory a lower one.", "");
  out.push("![latency vs load](latency.svg)", "");
  out.push("## Summary", "");
  out.push("| Scenario | Engine | Measure | Broker | Baseline | Ratio | Target | Met | CPU during the broker run (% of a core) |", "|---|---|---|---:|---:|---:|---|---|---|");
  for (const scenario of results.scenarios) for (const row of scenario.rows) out.push(summaryRow(row));
  out.push("");
  for (const scenario of results.scenarios) {
    out.push(`## ${scenario.title}`, "", scenario.method, "");
    if (scenario.findings.length > 0) {
      out.push("**Findings**", "");
      for (const finding of scenario.findings) out.push(`- ${finding}`);
      out.push("");
    }
    const notes = scenario.rows.filter((r) => r.note !== undefined && r.note !== "");
    if (notes.length > 0) {
      for (const row of notes) out.push(`- *${row.engine} · ${row.measure}*: ${row.note ?? ""}`);
      out.push("");
    }
    for (const table of scenario.details) out.push(...renderTable(table), "");
  }
  return `${out.join("\n")}\n`;
}

function summaryRow(row: ResultRow): string {
  const unit = (value: number | null): string => (value === null ? "—" : row.unit === "" ? fmt(value) : `${fmt(value)} ${row.unit}`);
  const met = row.status === "not run" ? "not run" : row.met === null ? "—" : row.met ? "✅ yes" : "❌ no";
  const broker = row.status === "not run" ? `not run: ${row.note ?? ""}` : unit(row.broker);
  return `| ${row.scenario} | ${row.engine} | ${row.measure} | ${broker} | ${unit(row.baseline)} | ${fmtRatio(row.ratio)} | ${row.target ?? "—"} | ${met} | ${row.cpu ?? ""} |`;
}

function renderTable(table: DetailTable): string[] {
  return [
    `**${table.title}**`,
    "",
    `| ${table.columns.join(" | ")} |`,
    `|${table.columns.map(() => "---").join("|")}|`,
    ...table.rows.map((row) => `| ${row.map((cell) => String(cell)).join(" | ")} |`),
  ];
}
