/**
 * `npm run fleet [-- --brokers N] [-- --port P]`: docker-compose.yml's topology as local processes,
 * on the same config files: Redis (the one answering at REDIS_URL or 127.0.0.1:6379, else a
 * `redis-server` of our own), the demo backend over HTTP, a worker and N brokers on
 * deploy/fleet.config.json (its `demo` host pointed at 127.0.0.1), HAProxy on deploy/haproxy.cfg
 * (with N server lines) at 127.0.0.1:P. Prints where everything is; SIGINT/SIGTERM stops
 * everything it started, load balancer first, members with SIGTERM (they hand their sessions off).
 */
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ProcessGroup, type PlainChild } from "../core/process-group.js";
import { keyPrefixOf, localFleetConfig, readJsonConfig } from "./fleet-config.js";
import { startLoadBalancer } from "./load-balancer.js";
import { redisAnswers, startRedisServer } from "./local-redis.js";
import { startBroker, startDemoBackend, startWorker, type Member } from "./members.js";
import { freePort, portInUse } from "./ports.js";
import { buildProblems, fromRepo, PATHS, REPO_ROOT } from "./repo-paths.js";

const USAGE = `Usage: npm run fleet -- [--brokers N] [--port P] [--redis-url URL]

  --brokers N      broker processes (default 2, as docker-compose.yml; at most 9)
  --port P         HAProxy's port on 127.0.0.1 (default 3000); brokers take P+1…P+N, the worker P+N+1
  --redis-url URL  the Redis to use (default: REDIS_URL, else redis://127.0.0.1:6379 if it answers,
                   else a redis-server started on 127.0.0.1:6379 or a free port, nothing on disk)

The demo backend listens on 127.0.0.1:3100. Logs: services/bench/logs/fleet/. Ctrl-C stops everything.`;

const LOG_DIR = join(REPO_ROOT, "services/bench/logs/fleet");
const DEMO_PORT = 3100;
const DEFAULT_REDIS = "redis://127.0.0.1:6379";
/** As compose's stop_grace_period: a member handing its sessions off gets this long. */
const MEMBER_STOP_GRACE_MS = 10_000;

function say(message: string): void {
  process.stdout.write(`${message}\n`);
}

async function main(): Promise<number> {
  let values;
  try {
    values = parseArgs({
      args: process.argv.slice(2),
      options: { brokers: { type: "string", default: "2" }, port: { type: "string", default: "3000" }, "redis-url": { type: "string" }, help: { type: "boolean", short: "h", default: false } },
      strict: true,
    }).values;
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  if (values.help) {
    say(USAGE);
    return 0;
  }
  const brokers = Number(values.brokers);
  const lbPort = Number(values.port);
  if (!Number.isInteger(brokers) || brokers < 1 || brokers > 9) {
    process.stderr.write(`--brokers: '${values.brokers}' is not a number from 1 to 9\n`);
    return 2;
  }
  if (!Number.isInteger(lbPort) || lbPort < 1 || lbPort + brokers + 1 > 65_535) {
    process.stderr.write(`--port: '${values.port}' is not a usable port\n`);
    return 2;
  }
  const { missing, stale } = buildProblems();
  if (missing.length > 0) {
    process.stderr.write(`Not built: ${missing.join(", ")}. Run npm run build first (npm run fleet does).\n`);
    return 1;
  }
  if (stale.length > 0) say(`warning: ${stale.join(", ")} changed since the last build; running the old build (npm run build to refresh)`);

  const brokerPorts = Array.from({ length: brokers }, (_, i) => lbPort + 1 + i);
  const workerPort = lbPort + brokers + 1;
  const busy = [];
  for (const port of [lbPort, ...brokerPorts, workerPort, DEMO_PORT]) if (await portInUse(port)) busy.push(port);
  if (busy.length > 0) {
    process.stderr.write(`Port(s) ${busy.join(", ")} on 127.0.0.1 are in use (another fleet, or docker compose?). Stop what holds them, or pass --port.\n`);
    return 1;
  }

  rmSync(LOG_DIR, { recursive: true, force: true });
  mkdirSync(LOG_DIR, { recursive: true });
  const group = new ProcessGroup(LOG_DIR);
  process.once("exit", () => group.killAllNow());
  const spawn = { detached: true, termGraceMs: MEMBER_STOP_GRACE_MS };
  let stopping = false;
  const started: { what: string; child: PlainChild }[] = [];
  const own = <T extends { child: PlainChild }>(what: string, item: T): T => {
    started.push({ what, child: item.child });
    void item.child.exited.then((code) => {
      if (!stopping) say(`${what} exited (${code}) — see ${fromRepo(LOG_DIR)}/${item.child.name}.log; the rest of the fleet keeps running`);
    });
    return item;
  };
  const stopAll = async (): Promise<void> => {
    stopping = true;
    // The entry point first (no new connections), then the members (SIGTERM: they hand their sessions
    // off), then what they use.
    const order = ["haproxy", "broker", "worker", "demo", "redis"];
    for (const prefix of order) await Promise.all(started.filter((s) => s.what.startsWith(prefix)).map((s) => s.child.stop()));
  };
  let signalled = 0;
  const onSignal = (signal: string): void => {
    if (++signalled > 1) {
      group.killAllNow();
      process.exit(130);
    }
    say(`\n${signal}: stopping the fleet…`);
    void stopAll().then(() => {
      say("fleet stopped");
      process.exit(0);
    });
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));

  try {
    const requested = values["redis-url"] ?? process.env.REDIS_URL;
    let redisUrl = requested ?? DEFAULT_REDIS;
    let redisNote = "already running; left running at the end";
    if (!(await redisAnswers(redisUrl))) {
      if (requested !== undefined) throw new Error(`no Redis answers at ${requested}`);
      const port = (await portInUse(6379)) ? await freePort() : 6379;
      say(`No Redis answers at ${DEFAULT_REDIS}: starting redis-server on 127.0.0.1:${port} (nothing on disk)…`);
      const redis = own("redis-server", await startRedisServer(group, port, "redis", say, spawn));
      redisUrl = redis.url;
      redisNote = "started by the fleet; stopped with it";
    }

    const demo = own("demo backend", await startDemoBackend(group, DEMO_PORT, spawn));
    const config = localFleetConfig(readJsonConfig(PATHS.fleetConfig), { demo: `127.0.0.1:${DEMO_PORT}` });
    const configFile = join(LOG_DIR, "fleet.local.config.json");
    writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);

    // The worker loads the catalog the brokers (jobs.process false) wait for.
    const worker = own("worker", await startWorker(group, { ...spawn, tag: "worker", configFile, port: workerPort, redisUrl }));
    const members: Member[] = await Promise.all(brokerPorts.map((port, i) => startBroker(group, { ...spawn, tag: `broker${i + 1}`, configFile, port, redisUrl })));
    members.forEach((member, i) => own(`broker ${i + 1}`, member));
    const lb = own(
      "haproxy",
      await startLoadBalancer(group, { ...spawn, bind: `127.0.0.1:${lbPort}`, brokers: brokerPorts.map((port) => `127.0.0.1:${port}`), balancing: "sticky", dir: LOG_DIR }, say),
    );

    say("");
    say(`mcp-broker fleet: ${brokers} broker(s), 1 worker, the demo backend, HAProxy — Ctrl-C stops it`);
    say(`  MCP endpoint   ${lb.url}   (HAProxy: legacy sessions stick to their broker by Mcp-Session-Id)`);
    members.forEach((member, i) => say(`  broker ${i + 1}       ${member.url}   (/healthz /readyz /metrics on the same port; pid ${member.child.pid})`));
    say(`  worker         ${worker.url}   (/healthz /readyz /metrics; pid ${worker.child.pid})`);
    say(`  demo backend   ${demo.url}`);
    say(`  Redis          ${redisUrl}   (${redisNote}; key prefix ${keyPrefixOf(config)})`);
    say(`  member config  ${fromRepo(configFile)}   (deploy/fleet.config.json, demo host → 127.0.0.1:${DEMO_PORT})`);
    say(`  haproxy.cfg    ${fromRepo(lb.cfgFile)}   (deploy/haproxy.cfg with ${brokers} server line(s))`);
    say(`  logs           ${fromRepo(LOG_DIR)}/`);
    say("");
    say(`Try: node shared/client/dist/cli.js watch ${lb.url} demo+demo://clock`);
  } catch (error) {
    process.stderr.write(`fleet: ${(error as Error).message}\n`);
    await stopAll();
    return 1;
  }
  return -1; // run until a signal
}

main().then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (error: unknown) => {
    process.stderr.write(`${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
