#!/usr/bin/env node
/**
 * The worker: a cluster member of the Redis engine without an MCP endpoint. It runs the cluster's
 * jobs (list reloads into the cluster catalog, the reap of dead members' holdings, the audit of the
 * subscription counts, lowered limits), competes for the backends' watcher leases (the holder makes
 * every upstream subscription for the cluster, and takes the backend's list changes in) and
 * heartbeats. Its own small HTTP port serves `/healthz`, `/readyz` and `/metrics`.
 *
 * With the embedded memory engine (no REDIS_URL) there is no cluster to serve, and it says so.
 */
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { ConfigError, parsePort } from "@mcp-broker/shared";
import { loadConfigFile } from "@mcp-broker/shared/node";
import { createLogger, createMember, createOperationsServer, HostCheck, describeRedis, startBackendsOrClose, stopOnSignals } from "@mcp-broker/member";

const USAGE = `Usage: mcp-broker-worker --config <file> [--port N] [--host H]
       mcp-broker-worker --help

The config file is the brokers' (JSON or YAML); MCP_BROKER_CONFIG may name it instead of --config.
REDIS_URL, REDIS_CLUSTER_NODES, PORT and HOST override the file. The worker serves /healthz, /readyz and /metrics on
server.host:server.port.`;

async function main(argv: string[]): Promise<number> {
  let values;
  try {
    values = parseArgs({ args: argv, options: { config: { type: "string", short: "c" }, port: { type: "string", short: "p" }, host: { type: "string" }, help: { type: "boolean", short: "h" } }, strict: true }).values;
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (values.help === true) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const file = values.config ?? process.env.MCP_BROKER_CONFIG;
  if (file === undefined || file === "") {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  const port = values.port === undefined ? undefined : parsePort(values.port);
  if (values.port !== undefined && port === undefined) {
    process.stderr.write(`--port: '${values.port}' is not a port number (0-65535).\n`);
    return 2;
  }
  let config;
  try {
    config = await loadConfigFile(file, process.env, { port, host: values.host });
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      return 2;
    }
    throw error;
  }
  if (config.redisUrl === undefined && config.redis.cluster === undefined) {
    process.stderr.write("mcp-broker-worker: no REDIS_URL or REDIS_CLUSTER_NODES: with the memory engine the broker runs the worker role in-process.\n");
    return 2;
  }
  if (!config.jobs.process) process.stderr.write("mcp-broker-worker: jobs.process is false in this config; the worker runs the cluster's jobs anyway.\n");
  const logger = createLogger(config.logging.level, "mcp-broker-worker");
  /**
   * /readyz says `starting`, as a broker's does, until the worker is first ready or has waited as
   * long as a broker waits for its backends at start; `degraded` after that.
   */
  /** When its start was over (not yet: always starting). */
  let startedAt = Number.POSITIVE_INFINITY;
  let wasReady = false;
  // The worker watches backends before any broker (see MemberDeps.preferredWatcher), unless told not to.
  const member = createMember({ ...config, jobs: { ...config.jobs, process: true } }, { logger, preferredWatcher: config.redis.workersWatchFirst });
  const http = createOperationsServer({
    metrics: member.metrics.registry,
    hostCheck: new HostCheck(config.server.allowedHosts),
    logger,
    report: () => {
      const ready = member.ready();
      wasReady ||= ready;
      const starting = !wasReady && Date.now() - startedAt < STARTUP_WAIT_MS;
      return { ready, status: ready ? "ready" : starting ? "starting" : "degraded", role: "worker", engine: member.engine, instance: member.instanceId, backends: member.backends() };
    },
  });
  // Bind first: a port in use ends the worker before it joins the cluster.
  try {
    await new Promise<void>((resolve, reject) => {
      http.once("error", reject);
      http.listen(config.server.port, config.server.host, () => {
        http.off("error", reject);
        resolve();
      });
    });
  } catch (error) {
    process.stderr.write(`mcp-broker-worker: cannot listen on ${config.server.host}:${config.server.port}: ${(error as Error).message}\n`);
    return 1;
  }
  const stoppable = {
    startBackends: () => member.start(),
    close: async () => {
      // Redis away (at start, or now): nothing below can reach it, so nothing waits for it (a worker that could not start took ~11 s to exit).
      if (!member.redisReachable()) member.abandonRedis();
      await new Promise<void>((resolve) => http.close(() => resolve()));
      await member.close();
    },
  };
  stopOnSignals(stoppable, logger);
  if (!(await startBackendsOrClose(stoppable, logger))) return 1;
  startedAt = Date.now();
  const { address, port: bound } = http.address() as AddressInfo;
  process.stderr.write(
    `mcp-broker-worker running: Redis engine: ${describeRedis(config)}, key prefix ${config.redis.keyPrefix}, backends ${config.backends.map((b) => b.id).join(", ")}; /healthz, /readyz and /metrics on http://${address}:${bound}\n`,
  );
  return -1;
}

/** As long as a broker waits for its backends at start (see the broker's cli). */
const STARTUP_WAIT_MS = 10_000;

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (error: unknown) => {
    process.stderr.write(`mcp-broker-worker: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
