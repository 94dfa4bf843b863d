#!/usr/bin/env node
import { parseArgs } from "node:util";
import { ConfigError, parsePort } from "@mcp-broker/shared";
import { loadConfigFile } from "@mcp-broker/shared/node";
import { createBroker, type Broker } from "./broker.js";
import { createLogger, describeRedis, startBackendsOrClose, stopOnSignals, type Logger } from "@mcp-broker/member";
import { serveStdio } from "./stdio/stdio-server.js";

const USAGE = `Usage:
  mcp-broker --config <file> [--port N] [--host H]   serve Streamable HTTP at /mcp
  mcp-broker --stdio --config <file>                 serve one local client over stdio

The config file is JSON (.json) or YAML. MCP_BROKER_CONFIG may name it instead of --config;
PORT, HOST, REDIS_URL and REDIS_CLUSTER_NODES override the file.`;

/**
 * Clients list right after connecting and many never re-list: the broker waits this long for its
 * backends before it serves /mcp (requests that arrive meanwhile wait too; a backend that is still
 * down then joins later, with list_changed).
 */
const STARTUP_WAIT_MS = 10_000;

async function main(argv: string[]): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        config: { type: "string", short: "c" },
        port: { type: "string", short: "p" },
        host: { type: "string" },
        stdio: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    });
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n\n${USAGE}\n`);
    return 2;
  }
  const { values } = args;
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const file = values.config ?? process.env.MCP_BROKER_CONFIG;
  if (file === undefined || file === "") {
    process.stderr.write(`No config file: pass --config <file> or set MCP_BROKER_CONFIG.\n\n${USAGE}\n`);
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
  const logger = createLogger(config.logging.level);
  const broker = createBroker(config, { logger });
  const stop = stopOnSignals(broker, logger);

  if (values.stdio) {
    if (!(await startBackendsOrClose(broker, logger))) return 1;
    await waitForBackends(broker, logger); // stdin waits meanwhile; nothing is lost
    broker.serve();
    await serveStdio(broker, { input: process.stdin, output: process.stdout });
    await stop("stdin closed");
    return 0;
  }
  // The port first: one that cannot be bound fails before Redis is reached or a backend is spawned.
  let url;
  try {
    url = await broker.bind();
  } catch (error) {
    logger.fatal({ err: (error as Error).message }, "cannot listen");
    process.stderr.write(`mcp-broker: cannot listen on ${config.server.host}:${config.server.port}: ${listenFailure(error)}\n`);
    await broker.close();
    return 1;
  }
  if (!(await startBackendsOrClose(broker, logger))) return 1;
  await waitForBackends(broker, logger);
  broker.serve();
  const engine = config.redisUrl === undefined && config.redis.cluster === undefined ? "memory engine" : `Redis engine: ${describeRedis(config)}, key prefix ${config.redis.keyPrefix}`;
  process.stderr.write(`mcp-broker ready: ${url} (${engine})\n`);
  return -1; // keep running
}

function listenFailure(error: unknown): string {
  switch ((error as NodeJS.ErrnoException).code) {
    case "EADDRINUSE":
      return "the port is in use (is another broker running?); choose another with --port or PORT";
    case "EACCES":
      return "permission denied (ports below 1024 need privileges); choose another with --port or PORT";
    case "EADDRNOTAVAIL":
      return "no such address on this machine; choose another with --host or HOST";
    default:
      return (error as Error).message;
  }
}

async function waitForBackends(broker: Broker, logger: Logger): Promise<void> {
  if (await broker.whenReady(STARTUP_WAIT_MS)) return;
  const down = broker.pool.all().filter((b) => b.readiness !== "connected").map((b) => ({ backend: b.id, state: b.readiness, reason: b.lastFailure }));
  if (down.length > 0) logger.warn({ down, waitedMs: STARTUP_WAIT_MS }, "serving before every backend is connected; the others join when they connect");
  // Connected, but their lists never came: on the Redis engine a list reload is a job, and a member
  // with jobs.process, or a worker, must run it.
  const unlisted = broker.pool.all().filter((b) => b.readiness === "connected" && !broker.catalog.ready(b.id)).map((b) => b.id);
  if (unlisted.length > 0) {
    const hint = broker.engine === "memory" ? "their list requests have not been answered" : "their lists load in reload jobs: is a worker, or a broker with jobs.process, running? (mcp_broker_jobs{state=\"waiting\"} in /metrics counts the jobs waiting)";
    logger.warn({ unlisted, waitedMs: STARTUP_WAIT_MS }, `serving before the lists of every connected backend are loaded (their items are not served until then): ${hint}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (error: unknown) => {
    process.stderr.write(`mcp-broker: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
