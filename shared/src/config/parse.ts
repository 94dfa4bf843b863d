import type { z } from "zod";
import { ConfigError } from "../errors.js";
import { brokerConfigSchema, type BrokerConfig } from "./schema.js";

/** Environment variables that override the file (see README "Configuration"). */
export interface ConfigEnv {
  PORT?: string | undefined;
  HOST?: string | undefined;
  REDIS_URL?: string | undefined;
}

export interface ConfigOverrides {
  port?: number | undefined;
  host?: string | undefined;
}

/** Validates an already-parsed config value; `source` names it in every error. */
export function parseConfig(value: unknown, source: string, env: ConfigEnv = {}, overrides: ConfigOverrides = {}): BrokerConfig {
  const result = brokerConfigSchema.safeParse(value);
  if (!result.success) throw new ConfigError(source, result.error.issues.map(formatIssue));
  const config = result.data;
  const issues: string[] = [];
  if (env.HOST !== undefined && env.HOST !== "") config.server.host = env.HOST;
  if (env.PORT !== undefined && env.PORT !== "") {
    const port = parsePort(env.PORT);
    if (port === undefined) issues.push(`PORT (environment): '${env.PORT}' is not a port number (0-65535)`);
    else config.server.port = port;
  }
  if (env.REDIS_URL !== undefined && env.REDIS_URL !== "") config.redisUrl = env.REDIS_URL;
  if (overrides.host !== undefined) config.server.host = overrides.host;
  if (overrides.port !== undefined) {
    if (!Number.isInteger(overrides.port) || overrides.port < 0 || overrides.port > 65_535) {
      issues.push(`--port: '${overrides.port}' is not a port number`);
    } else config.server.port = overrides.port;
  }
  if (issues.length > 0) throw new ConfigError(source, issues);
  return config;
}

/** A port as typed (digits only: `Number` would read " " or "" as 0, a random port), or undefined. */
export function parsePort(text: string): number | undefined {
  if (!/^\d{1,5}$/.test(text)) return undefined;
  const port = Number(text);
  return port <= 65_535 ? port : undefined;
}

function formatIssue(issue: z.core.$ZodIssue): string {
  const field = issue.path.length === 0 ? "(top level)" : issue.path.map(String).join(".");
  if (issue.code === "invalid_union" && issue.path.at(-2) === "backends") {
    return `${field}: ${issue.message}`;
  }
  return `${field}: ${issue.message}`;
}
