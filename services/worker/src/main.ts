#!/usr/bin/env node
/**
 * The worker process of the distributed (Redis) engine: backend watchers (one lease holder per
 * backend) and the BullMQ processors for list reloads and limit enforcement.
 *
 * With the embedded memory engine (no REDIS_URL) the broker process runs the worker role itself,
 * so this process has nothing to do and says so instead of pretending to work.
 */
import { ConfigError } from "@mcp-broker/shared";
import { loadConfigFile } from "@mcp-broker/shared/node";

async function main(): Promise<number> {
  const file = process.argv[process.argv.indexOf("--config") + 1] ?? process.env.MCP_BROKER_CONFIG;
  if (file === undefined || process.argv.indexOf("--config") < 0 && process.env.MCP_BROKER_CONFIG === undefined) {
    process.stderr.write("Usage: mcp-broker-worker --config <file>  (or MCP_BROKER_CONFIG)\n");
    return 2;
  }
  try {
    const config = await loadConfigFile(file, process.env);
    if (config.redisUrl === undefined) {
      process.stderr.write("mcp-broker-worker: no REDIS_URL: with the memory engine the broker runs the worker role in-process.\n");
      return 2;
    }
    process.stderr.write("mcp-broker-worker: the Redis engine is not available in this version; run the broker alone (memory engine).\n");
    return 2;
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\n`);
      return 2;
    }
    throw error;
  }
}

void main().then((code) => process.exit(code));
