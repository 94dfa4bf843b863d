import { readFileSync } from "node:fs";
import { relative } from "node:path";
import { summarize } from "../tools/summarize-cpuprofile.js";
import type { DetailTable } from "./result-model.js";

const TOP = 12;

/** A detail table of one step profile: the broker's top functions by self time, and its busy share by package. */
export function profileTable(file: string, resultsDir: string): DetailTable {
  const summary = summarize(JSON.parse(readFileSync(file, "utf8")) as Parameters<typeof summarize>[0]);
  const idle = summary.functions.find((f) => f.name === "(idle)")?.selfMs ?? 0;
  const busy = Math.max(1, summary.sampledMs - idle);
  const pct = (ms: number): string => `${((100 * ms) / busy).toFixed(1)} %`;
  const packages = summary.packages
    .filter((p) => p.name !== "(idle)")
    .slice(0, 6)
    .map((p) => `${p.name} ${pct(p.selfMs)}`)
    .join(", ");
  const rows = summary.functions
    .filter((f) => f.name !== "(idle)")
    .sort((a, b) => b.selfMs - a.selfMs)
    .slice(0, TOP)
    .map((f): (string | number)[] => [f.name || "(anonymous)", `\`${f.where}\``, pct(f.selfMs), pct(f.totalMs)]);
  return {
    title: `Broker CPU profile \`${relative(resultsDir, file)}\`: busy ${(busy / 1000).toFixed(2)} s of ${(summary.sampledMs / 1000).toFixed(2)} s; self time by package: ${packages}`,
    columns: ["function", "where", "self (% of busy)", "total (% of busy)"],
    rows,
  };
}
