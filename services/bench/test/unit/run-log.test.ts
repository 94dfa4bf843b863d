import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { BenchResults, ResultRow } from "../../src/report/result-model.js";
import { readRunLog, recordRun, runOf } from "../../src/report/run-log.js";

function row(scenario: string, engine: ResultRow["engine"], measure: string, ratio: number, met: boolean | null): ResultRow {
  return { scenario, engine, measure, unit: "ms", broker: ratio, baseline: 1, ratio, target: met === null ? null : "≤ 2× raw", met, status: "measured" };
}

function results(startedAt: string, redis5k: number): BenchResults {
  return {
    mode: "full",
    startedAt,
    finishedAt: startedAt,
    wallSeconds: 1,
    machine: { cpus: 2, node: "v20", platform: "linux", cpuModel: "x" },
    setup: [],
    scenarios: [
      {
        id: "unicast",
        title: "1. Unicast",
        method: "",
        details: [],
        findings: [],
        rows: [
          row("1. Unicast", "redis", "p99 latency @ 1,000 updates/s", 1.1, null),
          row("1. Unicast", "redis", "p99 latency @ 5,000 updates/s", redis5k, redis5k <= 2),
          { ...row("1. Unicast", "memory", "p99 latency @ 10,000 updates/s", 0, null), status: "not run", ratio: null },
        ],
      },
      { id: "memory", title: "4. Memory", method: "", details: [], findings: [], rows: [row("4. Memory", "memory", "RSS per idle session", 0.7, true)] },
    ],
  };
}

describe("run log (every full run's tail rows)", () => {
  it("keeps the unicast rows from 5k/s up and the hot URI, one line per run (a run recorded again replaces itself), and counts the consecutive runs that met each target", () => {
    const dir = mkdtempSync(join(tmpdir(), "run-log-"));
    recordRun(dir, runOf(results("2026-01-01T00:00:00Z", 1.5), "aaa"));
    recordRun(dir, runOf(results("2026-01-02T00:00:00Z", 2.5), "bbb"));
    recordRun(dir, runOf(results("2026-01-03T00:00:00Z", 1.9), "ccc"));
    recordRun(dir, runOf(results("2026-01-04T00:00:00Z", 1.8), "ddd"));
    const runs = readRunLog(dir);
    expect(runs.map((run) => run.commit)).toEqual(["aaa", "bbb", "ccc", "ddd"]);
    expect(runs[0]?.rows.map((r) => r.measure)).toEqual(["p99 latency @ 5,000 updates/s"]);
    let report = readFileSync(join(dir, "runs.md"), "utf8");
    expect(report).toContain("| p99 @ 5k/s | redis | ≤ 2× raw | ✅ ❌ ✅ ✅ | 2 |");
    expect(report).toContain("| 2026-01-02 00:00 | bbb | 2.50× ❌ |");
    // The newest run measured again (same start): replaced, and now three in a row hold.
    recordRun(dir, runOf(results("2026-01-02T00:00:00Z", 1.2), "bbb2"));
    expect(readRunLog(dir).map((run) => run.commit)).toEqual(["aaa", "bbb2", "ccc", "ddd"]);
    report = readFileSync(join(dir, "runs.md"), "utf8");
    expect(report).toContain("| p99 @ 5k/s | redis | ≤ 2× raw | ✅ ✅ ✅ ✅ | 4 (holds) |");
  });
});
