/**
 * `npm run bench [-- --quick] [-- --cpu-prof] [-- --only 1,3]`: runs the benchmark scenarios, each
 * broker figure next to a baseline measured in the same run, and writes results/results.json,
 * results/results.md and results/latency.svg. Every helper is a child process of this one and is
 * stopped before exit, whatever happens.
 */
import { rmSync } from "node:fs";
import { cpus } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Redis } from "ioredis";
import { testRedisCluster } from "@mcp-broker/shared/testing";
import { BackendControlServer } from "./backend/backend-control-server.js";
import { benchPlan } from "./bench-plan.js";
import { parseCli, SCENARIO_IDS, USAGE } from "./cli-options.js";
import { ProcessGroup } from "./core/process-group.js";
import { MemoryEngine } from "./engines/memory-engine.js";
import { RedisEngine } from "./engines/redis-engine.js";
import type { BenchResults, ScenarioResult } from "./report/result-model.js";
import { KNOWN_CAUSES } from "./report/known-causes.js";
import { profileTable } from "./report/profile-table.js";
import { currentCommit, recordRun, runOf, RUN_LOG_REPORT } from "./report/run-log.js";
import { writeResults } from "./report/write-results.js";
import type { BenchContext } from "./scenarios/bench-context.js";
import { runBroadcast } from "./scenarios/broadcast.js";
import { runClusterListStorm } from "./scenarios/cluster-list-storm.js";
import { runHotUri } from "./scenarios/hot-uri.js";
import { runListStorm } from "./scenarios/list-storm.js";
import { runMemory } from "./scenarios/memory.js";
import { runSubscribeCost } from "./scenarios/subscribe-cost.js";
import { runScale } from "./scenarios/scale.js";
import { runStorm } from "./scenarios/storm.js";
import { runUnicast } from "./scenarios/unicast.js";
import { runWorkerKill } from "./scenarios/worker-kill.js";

const SCENARIOS: Record<(typeof SCENARIO_IDS)[number], { title: string; run: (ctx: BenchContext) => Promise<ScenarioResult> }> = {
  unicast: { title: "1. Unicast", run: runUnicast },
  "hot-uri": { title: "2. Hot URI", run: runHotUri },
  broadcast: { title: "3. Broadcast", run: runBroadcast },
  memory: { title: "4. Memory", run: runMemory },
  subscribe: { title: "5. Subscribe cost", run: runSubscribeCost },
  "list-storm": { title: "6. List storm", run: runListStorm },
  "cluster-list-storm": { title: "7. Cluster list storm", run: runClusterListStorm },
  "worker-kill": { title: "8. Worker killed mid-reload", run: runWorkerKill },
  storm: { title: "9. Reconnect storm", run: runStorm },
  scale: { title: "10. Sessions at scale", run: runScale },
};

const packageDir = join(dirname(fileURLToPath(import.meta.url)), "..");
const resultsDir = join(packageDir, "results");

async function redisProblem(url: string): Promise<string | undefined> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 2_000 });
  try {
    await redis.connect();
    await redis.ping();
    return undefined;
  } catch (error) {
    return `Redis unreachable at ${url}: ${(error as Error).message}`;
  } finally {
    redis.disconnect();
  }
}

async function main(): Promise<number> {
  let options;
  try {
    options = parseCli(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  if (options.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const plan = benchPlan(options.quick);
  const started = new Date();
  const log = (message: string): void => {
    process.stdout.write(`[${((Date.now() - started.getTime()) / 1000).toFixed(1).padStart(6)}s] ${message}\n`);
  };
  const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
  rmSync(join(resultsDir, "logs"), { recursive: true, force: true });
  const group = new ProcessGroup(join(resultsDir, "logs"));
  const control = await BackendControlServer.start();
  const onSignal = (): void => {
    group.killAllNow();
    process.exit(130);
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.once("exit", () => group.killAllNow());

  const stepProfiles: string[] = [];
  const engineDeps = {
    group,
    control,
    diagnostics: { cpuProfDir: options.cpuProf ? resultsDir : undefined, heapSnapshotDir: options.heapSnapshot ? resultsDir : undefined, stepProfiles },
  };
  const redisUnavailable = await redisProblem(redisUrl);
  const memory = new MemoryEngine(engineDeps);
  const redis = new RedisEngine({ ...engineDeps, redisUrl, redisUnavailable });
  // A local Redis Cluster (REDIS_CLUSTER_NODES names another) for the Redis Cluster rows of scenarios 1–3,
  // in the full run only (--quick checks that everything runs; the cluster tests of npm test cover that engine).
  const needsCluster = options.only.length === 0 || options.only.some((id) => ["unicast", "hot-uri", "broadcast"].includes(id));
  const cluster: { nodes: string[]; problem: string | undefined } =
    plan.mode === "quick"
      ? { nodes: [], problem: "full run only (--quick leaves the Redis Cluster engine out)" }
      : !needsCluster
        ? { nodes: [], problem: "not needed by the selected scenarios" }
        : await testRedisCluster().then(
            (found) => ({ nodes: found.nodes, problem: undefined }),
            (error: unknown) => ({ nodes: [], problem: `no Redis Cluster: ${(error as Error).message}` }),
          );
  const redisCluster = new RedisEngine({ ...engineDeps, redisUrl, redisUnavailable: cluster.problem, cluster: { nodes: cluster.nodes } });
  const ctx: BenchContext = {
    plan,
    group,
    control,
    engines: [memory, redis, redisCluster],
    memory,
    redis,
    redisUrl,
    redisUnavailable,
    log,
  };
  const results: BenchResults = {
    mode: plan.mode,
    startedAt: started.toISOString(),
    finishedAt: started.toISOString(),
    wallSeconds: 0,
    machine: { cpus: cpus().length, node: process.version, platform: `${process.platform} ${process.arch}`, cpuModel: cpus()[0]?.model ?? "unknown" },
    setup: [
      "Broker: @mcp-broker/broker (createBroker), each instance in its own process, log level warn, default keep-alive (15 s) and list debounce (1 s), upstream release grace 1 s, subscription limits raised (all sessions are one anonymous principal). " +
        `Memory engine (every scenario): ${memory.description}. ` +
        `Redis engine (scenarios 1–3): ${redis.unavailableReason === undefined ? `${redis.description}; Redis at ${redisUrl}` : `not run: ${redis.unavailableReason}`}. ` +
        `Redis Cluster (scenarios 1–3, engine redis-cluster): ${redisCluster.unavailableReason === undefined ? `${redisCluster.description}; seed nodes ${cluster.nodes.join(", ")}` : `not run: ${redisCluster.unavailableReason}`}. ` +
        `Redis clusters with workers (scenarios 7–8): ${redis.clusterUnavailableReason() === undefined ? "3 broker processes with jobs.process false and worker processes (services/worker/dist/main.js, as deployed), one cluster per scenario" : `not run: ${redis.clusterUnavailableReason() ?? ""}`}.`,
      "Backend: the bench backend (SDK v2 McpServer, legacy era 2025-11-25), one McpServer per connection, each sent only the updates of what it subscribed; " +
        "memory engine: started by the broker over **stdio**; Redis engine: one process started by the orchestrator, serving **Streamable HTTP** on 127.0.0.1, one session per broker. " +
        "The orchestrator drives it over a TCP control socket.",
      `Load: ${plan.generators} load-generator processes per target, raw node:http + a minimal SSE parser; their CPU is reported with each step (100 % = one core).`,
      `Baselines: ${ctx.redisUnavailable ?? `Redis at ${redisUrl}`} (ioredis publisher process → plain Node SSE server process → the same readers).`,
      ...(options.cpuProf ? ["Broker children ran under --cpu-prof (and per-step inspector profiles): figures include profiler overhead."] : []),
      ...(options.heapSnapshot ? ["--heap-snapshot: heap snapshots were taken in the memory scenario, which inflates the RSS figures of this run; use it for heap composition only."] : []),
    ],
    scenarios: [],
  };
  if (ctx.redisUnavailable !== undefined) log(`warning: ${ctx.redisUnavailable}; Redis baselines and the Redis engine will be reported as not run`);

  const selected = SCENARIO_IDS.filter((id) => options.only.length === 0 || options.only.includes(id));
  let failures = 0;
  try {
    for (const id of selected) {
      const scenario = SCENARIOS[id];
      log(`=== ${scenario.title} ===`);
      let result: ScenarioResult;
      const profilesBefore = stepProfiles.length;
      try {
        result = await scenario.run(ctx);
        result.details.push(...stepProfiles.slice(profilesBefore).map((file) => profileTable(file, resultsDir)));
        // Scenario 5 has no target: the broker's cost next to a bare request is explained always.
        // The known causes come from profiling the memory engine; the Redis deployment has not been profiled.
        if (result.id === "subscribe" || result.rows.some((row) => row.met === false && row.engine === "memory")) result.findings.push(...(KNOWN_CAUSES[result.id] ?? []));
        if (result.rows.some((row) => row.met === false && row.engine === "redis")) result.findings.push(...(KNOWN_CAUSES[`${result.id}:redis`] ?? []));
      } catch (error) {
        failures++;
        log(`${scenario.title} failed: ${(error as Error).stack ?? String(error)}`);
        await group.stopAll();
        result = {
          id,
          title: scenario.title,
          method: "",
          rows: [{ scenario: scenario.title, engine: "n/a", measure: "scenario", unit: "", broker: null, baseline: null, ratio: null, target: null, met: null, status: "not run", note: `failed: ${(error as Error).message}` }],
          details: [],
          findings: [],
        };
      }
      results.scenarios.push(result);
      results.finishedAt = new Date().toISOString();
      results.wallSeconds = (Date.now() - started.getTime()) / 1000;
      writeResults(resultsDir, results);
    }
  } finally {
    await group.stopAll();
    await control.close();
  }
  // A whole full run joins the run log (the tail rows of every full run, see report/run-log.ts).
  if (plan.mode === "full" && options.only.length === 0) {
    recordRun(resultsDir, runOf(results, currentCommit(packageDir)));
    log(`run log: ${join(resultsDir, RUN_LOG_REPORT)}`);
  }
  log(`done in ${results.wallSeconds.toFixed(0)} s: ${join(resultsDir, "results.md")}`);
  return failures > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
