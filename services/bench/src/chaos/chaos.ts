/**
 * `npm run chaos [-- --quick] [-- --only <ids>]`: the failover harness. Runs the fleet of
 * `npm run fleet` (3 brokers, a worker, HAProxy, Redis) under numbered updates and thousands of
 * reconnecting clients while brokers are SIGKILLed (HAProxy round-robin, then sticky) or Redis is
 * restarted, and writes results/chaos/results.json and results.md: lost updates, spurious
 * re-notifications, 404s, sessions started over, resumption times, deliveries. Process logs go to
 * results/chaos/logs/ (git-ignored). Method: services/bench/README.md, "Failover harness".
 */
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { BackendControlServer } from "../backend/backend-control-server.js";
import { ProcessGroup } from "../core/process-group.js";
import { redisAnswers, startRedisServer } from "../fleet/local-redis.js";
import { freePort } from "../fleet/ports.js";
import { buildProblems, REPO_ROOT } from "../fleet/repo-paths.js";
import { which } from "../fleet/system-programs.js";
import { chaosPlan, keyPool } from "./chaos-plan.js";
import { writeChaosResults, type ChaosResults, type ChaosVariantResult } from "./chaos-results.js";
import { runVariant } from "./chaos-variant.js";

const USAGE = `Usage: npm run chaos -- [--quick] [--only <ids>]

  --quick        reduced run (under 3 minutes): fewer clients, 2 kills per variant, a shorter Redis variant
  --only <ids>   comma-separated variants: round-robin, sticky, redis-restart

Redis: REDIS_URL (default redis://127.0.0.1:6379) for the kill variants, with a key prefix of the run's own;
the Redis variant always runs a redis-server of its own. HAProxy is installed with apt-get when missing.
Results: services/bench/results/chaos/results.{json,md}; process logs: services/bench/results/chaos/logs/.`;

const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const resultsDir = join(packageDir, "results", "chaos");

function commitOf(): string {
  try {
    const head = execFileSync("git", ["-C", REPO_ROOT, "rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["-C", REPO_ROOT, "status", "--porcelain", "--", "services/broker", "services/worker", "shared", "deploy"], { encoding: "utf8" }).trim();
    return dirty === "" ? head : `${head} (with uncommitted changes in services/broker, services/worker, shared or deploy)`;
  } catch {
    return "unknown (not a git checkout)";
  }
}

function version(command: string, args: string[]): string {
  try {
    return execFileSync(command, args, { encoding: "utf8" }).split("\n")[0]?.trim() ?? "?";
  } catch {
    return "?";
  }
}

async function main(): Promise<number> {
  let values;
  try {
    values = parseArgs({ args: process.argv.slice(2), options: { quick: { type: "boolean", default: false }, only: { type: "string" }, help: { type: "boolean", short: "h", default: false } }, strict: true }).values;
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const plan = chaosPlan(values.quick);
  const only = (values.only ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "");
  const unknown = only.filter((id) => !plan.variants.some((v) => v.id === id));
  if (unknown.length > 0) {
    process.stderr.write(`unknown variant(s): ${unknown.join(", ")}\n\n${USAGE}\n`);
    return 2;
  }
  const { missing, stale } = buildProblems();
  if (missing.length > 0) {
    process.stderr.write(`Not built: ${missing.join(", ")}. Run npm run build first (npm run chaos does).\n`);
    return 1;
  }
  const started = new Date();
  const log = (message: string): void => {
    process.stdout.write(`[${((Date.now() - started.getTime()) / 1000).toFixed(1).padStart(6)}s] ${message}\n`);
  };
  if (stale.length > 0) log(`warning: ${stale.join(", ")} changed since the last build; measuring the old build`);

  const logDir = join(resultsDir, "logs");
  rmSync(logDir, { recursive: true, force: true });
  const group = new ProcessGroup(logDir);
  const groups = [group];
  const control = await BackendControlServer.start();
  const killAll = (): void => {
    for (const g of groups) g.killAllNow();
  };
  const onSignal = (): void => {
    killAll();
    process.exit(130);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.once("exit", killAll);

  let redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
  let redisNote = `the machine's Redis at ${redisUrl}`;
  if (!(await redisAnswers(redisUrl))) {
    const own = await startRedisServer(group, await freePort(), "redis-run", log);
    redisNote = `no Redis answered at ${redisUrl}: a redis-server of the harness at ${own.url}`;
    redisUrl = own.url;
  }

  const results: ChaosResults = {
    mode: plan.mode,
    command: `npm run chaos${values.quick ? " -- --quick" : ""}${only.length > 0 ? ` ${values.quick ? "" : "-- "}--only ${only.join(",")}` : ""}`,
    commit: commitOf(),
    startedAt: started.toISOString(),
    finishedAt: started.toISOString(),
    wallSeconds: 0,
    machine: { cpus: cpus().length, node: process.version, platform: `${process.platform} ${process.arch}`, cpuModel: cpus()[0]?.model ?? "unknown" },
    setup: [
      `Fleet as \`npm run fleet\` runs it: ${plan.brokers} broker processes and 1 worker on deploy/fleet.config.json (jobs.process false on the brokers; defaults: redis.instanceTtlMs 30 s, redis.leaseTtlMs 2 s, server.resumeHistory 64), its backend replaced by the bench backend over Streamable HTTP; ${version(which("haproxy") ?? "haproxy", ["-v"])} on deploy/haproxy.cfg (${plan.brokers} server lines; an x-chaos-server response header naming the server, for the evidence).`,
      `Redis: ${redisNote} (a key prefix per variant, deleted after it) for the kill variants; the Redis variant runs a redis-server of its own (--save "" --appendonly no), ${version("redis-server", ["--version"])}.`,
      `Load: ${plan.legacyClients} legacy sessions + ${plan.modernClients} listen streams in ${plan.generators} load-generator processes (raw HTTP, reconnecting as the SDK client does), ${plan.keysPerClient} resources each of a pool of ${keyPool(plan)} (${plan.subscribersPerKey} subscribers per resource); the bench backend emits ${plan.rate} numbered updates/s round-robin over the pool.`,
      "Judged on the position basis (the brief's definition: a notification carrying an event id or cursor at or after the update's cluster position); the time basis (a notification arriving after the update was emitted, i.e. what a client that re-reads on every notification sees) is given beside it.",
    ],
    variants: [],
  };
  const selected = plan.variants.filter((v) => only.length === 0 || only.includes(v.id));
  let failures = 0;
  try {
    for (const variant of selected) {
      log(`=== ${variant.title} ===`);
      let result: ChaosVariantResult;
      try {
        result = await runVariant({ plan, groups, control, redisUrl, logDir, log }, variant, plan.variants.indexOf(variant) + 1);
      } catch (error) {
        failures++;
        log(`${variant.id} failed: ${(error as Error).stack ?? String(error)}`);
        result = { id: variant.id, title: variant.title, method: "", rows: [{ variant: variant.id, measure: "variant", value: null, unit: "", target: null, met: null, note: `failed: ${(error as Error).message}` }], findings: [], details: [] };
      }
      results.variants.push(result);
      results.finishedAt = new Date().toISOString();
      results.wallSeconds = (Date.now() - started.getTime()) / 1000;
      writeChaosResults(resultsDir, results);
    }
  } finally {
    await group.stopAll();
    await control.close();
  }
  const missed = results.variants.flatMap((v) => v.rows.filter((r) => r.met === false).map((r) => `${v.id}: ${r.measure}`));
  log(`done in ${results.wallSeconds.toFixed(0)} s: ${join(resultsDir, "results.md")}`);
  if (missed.length > 0) log(`targets missed: ${missed.join("; ")}`);
  return failures > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
