import { pino, type Logger } from "pino";

export type { Logger };

/** JSON logs to stderr (stdout is the MCP channel in stdio mode). */
export function createLogger(level: string, name = "mcp-broker"): Logger {
  return pino({ name, level }, pino.destination(2));
}
