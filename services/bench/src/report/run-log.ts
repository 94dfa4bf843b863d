import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { BenchResults, ResultRow } from "./result-model.js";

/**
 * The tail rows of every full run, kept: results.json holds the last run only, and a p99 moves
 * between runs on one machine, so whether a target holds is a question for several runs (issue
 * 19: "in three consecutive full runs", "the report keeps every run's figures, not the best one").
 * results/runs.jsonl gets one line per full run (appended when the run ends); results/runs.md
 * shows them all, oldest first, with how many consecutive runs, ending at the newest, met each target.
 */
export const RUN_LOG_FILE = "runs.jsonl";
export const RUN_LOG_REPORT = "runs.md";
/** How many consecutive full runs a target must hold in (issue 19). */
export const CONSECUTIVE_RUNS = 3;

export interface LoggedRun {
  startedAt: string;
  finishedAt: string;
  /** The code measured: `git describe`-like short commit, `+changes` when the tree had uncommitted ones. */
  commit: string | null;
  rows: Pick<ResultRow, "scenario" | "engine" | "measure" | "broker" | "baseline" | "ratio" | "target" | "met">[];
}

/** The rows a run log keeps: unicast p99 from 5k updates/s up, and the hot URI. */
function logged(row: ResultRow): boolean {
  if (row.status !== "measured") return false;
  if (row.scenario.startsWith("2.")) return true;
  return row.scenario.startsWith("1.") && rateOf(row.measure) >= 5_000;
}

export function runOf(results: BenchResults, commit: string | null): LoggedRun {
  const rows = results.scenarios
    .flatMap((scenario) => scenario.rows)
    .filter(logged)
    .map(({ scenario, engine, measure, broker, baseline, ratio, target, met }) => ({ scenario, engine, measure, broker, baseline, ratio, target, met }));
  return { startedAt: results.startedAt, finishedAt: results.finishedAt, commit, rows };
}

/** The commit the bench runs from (null outside a git checkout). */
export function currentCommit(cwd: string): string | null {
  try {
    const head = execFileSync("git", ["rev-parse", "--short", "HEAD"], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    // Uncommitted changes anywhere in the repository but the results themselves.
    const changes = execFileSync("git", ["status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude)services/bench/results"], { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    return changes === "" ? head : `${head}+changes`;
  } catch {
    return null;
  }
}

export function readRunLog(dir: string): LoggedRun[] {
  const file = join(dir, RUN_LOG_FILE);
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as LoggedRun);
}

/** Adds `run` to the log in `dir` (a run already there, by its start, is replaced) and rewrites runs.md. */
export function recordRun(dir: string, run: LoggedRun): LoggedRun[] {
  const runs = [...readRunLog(dir).filter((r) => r.startedAt !== run.startedAt), run].sort((a, b) => a.startedAt.localeCompare(b.startedAt));
  writeFileSync(join(dir, RUN_LOG_FILE), runs.map((r) => `${JSON.stringify(r)}\n`).join(""));
  writeFileSync(join(dir, RUN_LOG_REPORT), renderRunLog(runs));
  return runs;
}

type Column = { scenario: string; engine: string; measure: string };
const columnKey = (c: Column): string => `${c.scenario}|${c.engine}|${c.measure}`;
const ENGINES = ["memory", "redis", "redis-cluster"];

function shortMeasure(measure: string): string {
  const rate = rateOf(measure);
  if (rate > 0) return `p99 @ ${rate / 1_000}k/s`;
  return measure.startsWith("deliveries/s") ? "hot URI" : measure;
}

/** runs.md: per targeted row, the runs that met it; then every run's ratios (broker ÷ same-run raw). */
export function renderRunLog(runs: readonly LoggedRun[]): string {
  const columns = new Map<string, Column>();
  for (const run of runs) for (const row of run.rows) columns.set(columnKey(row), { scenario: row.scenario, engine: row.engine, measure: row.measure });
  const ordered = [...columns.values()].sort(
    (a, b) => a.scenario.localeCompare(b.scenario) || rateOf(a.measure) - rateOf(b.measure) || ENGINES.indexOf(a.engine) - ENGINES.indexOf(b.engine),
  );
  const cell = (run: LoggedRun, column: Column): string => {
    const row = run.rows.find((r) => columnKey(r) === columnKey(column));
    if (row === undefined || row.ratio === null) return "—";
    const mark = row.met === true ? " ✅" : row.met === false ? " ❌" : "";
    return `${row.ratio.toFixed(2)}×${mark}`;
  };
  const lines = [
    "# Bench: every full run's tail figures",
    "",
    `Written by \`npm run bench\` at the end of each full run (results/${RUN_LOG_FILE}, one line per run; the runs before this log existed were read back from the results.json each committed). ` +
      "Figures are broker ÷ the raw baseline measured in the same run; ✅/❌ is the target the run stated (none: the run had no target for that row yet). " +
      `Issue 19 asks for the targets to hold in ${CONSECUTIVE_RUNS} consecutive full runs.`,
    "",
    "| row | engine | target | met in the last runs, newest last | consecutive runs met, ending at the newest |",
    "|---|---|---|---|---|",
  ];
  for (const column of ordered) {
    const withTarget = runs.filter((run) => run.rows.some((r) => columnKey(r) === columnKey(column) && r.met !== null));
    if (withTarget.length === 0) continue;
    const latest = withTarget.at(-1)?.rows.find((r) => columnKey(r) === columnKey(column));
    let streak = 0;
    for (const run of [...withTarget].reverse()) {
      if (run.rows.find((r) => columnKey(r) === columnKey(column))?.met !== true) break;
      streak++;
    }
    const recent = withTarget
      .slice(-6)
      .map((run) => (run.rows.find((r) => columnKey(r) === columnKey(column))?.met === true ? "✅" : "❌"))
      .join(" ");
    lines.push(`| ${shortMeasure(column.measure)} | ${column.engine} | ${latest?.target ?? ""} | ${recent} | ${streak}${streak >= CONSECUTIVE_RUNS ? " (holds)" : ""} |`);
  }
  lines.push("", "| finished (UTC) | code | " + ordered.map((c) => `${shortMeasure(c.measure)} ${c.engine}`).join(" | ") + " |");
  lines.push("|---|---|" + ordered.map(() => "---").join("|") + "|");
  for (const run of runs) lines.push(`| ${run.finishedAt.slice(0, 16).replace("T", " ")} | ${run.commit ?? "?"} | ${ordered.map((c) => cell(run, c)).join(" | ")} |`);
  return `${lines.join("\n")}\n`;
}

/** The update rate of a unicast row's measure ("p99 latency @ 5,000 updates/s"), 0 for other rows. */
function rateOf(measure: string): number {
  const rate = /@ ([\d,]+) updates\/s/.exec(measure);
  return rate?.[1] === undefined ? 0 : Number(rate[1].replace(/,/g, ""));
}
