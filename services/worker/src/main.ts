#!/usr/bin/env node
/**
 * The worker: a cluster member of the Redis engine without an MCP endpoint. It connects to the
 * backends, competes for their watcher leases (the holder makes every upstream subscription for
 * the cluster), heartbeats, and releases what the sessions of dead instances held. Broker instances
 * do all of this too, so workers are optional: run them to keep upstream watching off the
 * instances that serve clients, or to keep it going while those are redeployed.
 *
 * With the embedded memory engine (no REDIS_URL) there is no cluster to serve, and it says so.
 */
import { parseArgs } from "node:util";
import { ConfigError } from "@mcp-broker/shared";
import { loadConfigFile } from "@mcp-broker/shared/node";
import { createBroker, createLogger, redactUrl, startBackendsOrClose, stopOnSignals } from "@mcp-broker/broker";

const USAGE = "Usage: mcp-broker-worker --config <file>  (or MCP_BROKER_CONFIG; REDIS_URL overrides the file)";

async function main(argv: string[]): Promise<number> {
  let file: string | undefined;
  try {
    file = parseArgs({ args: argv, options: { config: { type: "string", short: "c" } }, strict: true }).values.config ?? process.env.MCP_BROKER_CONFIG;
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (file === undefined || file === "") {
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  let config;
  try {
    config = await loadConfigFile(file, process.env);
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      return 2;
    }
    throw error;
  }
  if (config.redisUrl === undefined) {
    process.stderr.write("mcp-broker-worker: no REDIS_URL: with the memory engine the broker runs the worker role in-process.\n");
    return 2;
  }
  const logger = createLogger(config.logging.level);
  const worker = createBroker(config, { logger });
  stopOnSignals(worker, logger);
  if (!(await startBackendsOrClose(worker, logger))) return 1;
  process.stderr.write(`mcp-broker-worker running: Redis engine at ${redactUrl(config.redisUrl)}, key prefix ${config.redis.keyPrefix}, backends ${config.backends.map((b) => b.id).join(", ")}\n`);
  return -1;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (error: unknown) => {
    process.stderr.write(`mcp-broker-worker: ${(error as Error).stack ?? String(error)}\n`);
    process.exit(1);
  },
);
