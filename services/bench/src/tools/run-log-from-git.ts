/**
 * `node dist/tools/run-log-from-git.js`: fills results/runs.jsonl (see report/run-log.ts) with the
 * full runs whose results.json was committed before the log existed, read back from git history.
 * A run already in the log (by its start) is kept as it is. The code column names the commit that
 * recorded the results (the code measured is that commit's parent, or the same commit when results
 * and code landed together).
 */
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { BenchResults } from "../report/result-model.js";
import { readRunLog, recordRun, runOf } from "../report/run-log.js";

const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const resultsDir = join(packageDir, "results");
const git = (...args: string[]): string => execFileSync("git", args, { cwd: packageDir, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });

const known = new Set(readRunLog(resultsDir).map((run) => run.startedAt));
let added = 0;
for (const commit of git("log", "--format=%h", "--", "results/results.json").split("\n").filter((line) => line !== "")) {
  let results: BenchResults;
  try {
    results = JSON.parse(git("show", `${commit}:services/bench/results/results.json`)) as BenchResults;
  } catch {
    continue;
  }
  if (results.mode !== "full" || known.has(results.startedAt)) continue;
  known.add(results.startedAt);
  recordRun(resultsDir, runOf(results, `results in ${commit}`));
  added++;
}
process.stdout.write(`${added} committed full runs added to ${join(resultsDir, "runs.jsonl")}\n`);
