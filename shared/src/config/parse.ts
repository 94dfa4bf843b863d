import type { z } from "zod";
import { ConfigError } from "../errors.js";
import { brokerConfigSchema, REDIS_URL, REDIS_URL_EXPECTED, SEED_NODE, type BrokerConfig } from "./schema.js";

/** Environment variables that override the file (see README "Configuration"). */
export interface ConfigEnv {
  PORT?: string | undefined;
  HOST?: string | undefined;
  REDIS_URL?: string | undefined;
  /** Redis Cluster seed nodes, `host:port,host:port,...` (see `redis.cluster`). */
  REDIS_CLUSTER_NODES?: string | undefined;
}

export interface ConfigOverrides {
  port?: number | undefined;
  host?: string | undefined;
}

/** Validates an already-parsed config value; `source` names it in every error. */
export function parseConfig(value: unknown, source: string, env: ConfigEnv = {}, overrides: ConfigOverrides = {}): BrokerConfig {
  const result = brokerConfigSchema.safeParse(value);
  if (!result.success) throw new ConfigError(source, result.error.issues.flatMap((issue) => formatIssue(issue, value)));
  const config = result.data;
  const issues: string[] = [];
  if (env.HOST !== undefined && env.HOST !== "") config.server.host = env.HOST;
  if (env.PORT !== undefined && env.PORT !== "") {
    const port = parsePort(env.PORT);
    if (port === undefined) issues.push(`PORT (environment): '${env.PORT}' is not a port number (0-65535)`);
    else config.server.port = port;
  }
  // The environment wins over the file; REDIS_URL and REDIS_CLUSTER_NODES together are a mistake.
  const url = env.REDIS_URL !== undefined && env.REDIS_URL !== "" ? env.REDIS_URL : undefined;
  const nodes = env.REDIS_CLUSTER_NODES !== undefined && env.REDIS_CLUSTER_NODES.trim() !== "" ? env.REDIS_CLUSTER_NODES.split(",").map((node) => node.trim()) : undefined;
  if (url !== undefined && nodes !== undefined) issues.push("REDIS_URL and REDIS_CLUSTER_NODES (environment): set one (one Redis, or a Redis Cluster's seed nodes), not both");
  else if (url !== undefined && !REDIS_URL.test(url)) issues.push(`REDIS_URL (environment): '${url}' is not ${REDIS_URL_EXPECTED}`);
  else if (url !== undefined) {
    config.redisUrl = url;
    delete config.redis.cluster;
  } else if (nodes !== undefined) {
    const bad = nodes.filter((node) => !SEED_NODE.test(node) || Number(SEED_NODE.exec(node)?.[2]) > 65_535);
    if (bad.length > 0) issues.push(`REDIS_CLUSTER_NODES (environment): '${bad[0]}' is not host:port (seed nodes are host:port,host:port,..., not URLs)`);
    else {
      config.redis.cluster = nodes;
      delete config.redisUrl;
    }
  }
  // Nothing else runs a memory-engine broker's jobs: its backends' lists would never load.
  if (!config.jobs.process && config.redisUrl === undefined && config.redis.cluster === undefined) {
    issues.push("jobs.process: false needs the Redis engine (redisUrl or redis.cluster, or REDIS_URL or REDIS_CLUSTER_NODES): it leaves the jobs, list reloads among them, to the other members of a cluster, and on the memory engine there are none (a broker would never load its backends' lists)");
  }
  if (overrides.host !== undefined) {
    if (overrides.host.trim() === "") issues.push("--host: '' names no address (0.0.0.0 or :: for every interface)");
    else config.server.host = overrides.host;
  }
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

function formatIssue(issue: z.core.$ZodIssue, value: unknown): string[] {
  const field = issue.path.length === 0 ? "(top level)" : issue.path.map(String).join(".");
  if (issue.code === "invalid_union" && issue.path.at(-2) === "backends") {
    // A backend is stdio (`command`) or HTTP (`url`): one that has exactly one of them gets that
    // kind's issues, naming the field at fault (the union's own message named neither).
    const backend = issue.path.reduce<unknown>((at, key) => (typeof at === "object" && at !== null ? (at as Record<PropertyKey, unknown>)[key] : undefined), value);
    const has = (key: string) => typeof backend === "object" && backend !== null && key in backend;
    const kind = has("command") && !has("url") ? 0 : has("url") && !has("command") ? 1 : undefined;
    const branch = kind === undefined ? undefined : issue.errors[kind];
    if (branch !== undefined && branch.length > 0) return branch.flatMap((inner) => formatIssue({ ...inner, path: [...issue.path, ...inner.path] }, value));
    if (!has("command") && !has("url")) {
      // And what is wrong whatever its transport (a bad id, timeoutMs): the issues both kinds found, but the missing command or url.
      const other = issue.errors[1] ?? [];
      const common = (issue.errors[0] ?? []).filter((inner) => inner.path[0] !== "command" && other.some((o) => o.path.join(".") === inner.path.join(".") && o.message === inner.message));
      return [`${field}: a backend needs \`command\` (stdio) or \`url\` (Streamable HTTP)`, ...common.flatMap((inner) => formatIssue({ ...inner, path: [...issue.path, ...inner.path] }, value))];
    }
  }
  // A record's key that fails its check: what the check says ("Invalid key in record" says nothing).
  if (issue.code === "invalid_key" && issue.issues[0] !== undefined) return [`${field}: ${issue.issues[0].message}`];
  return [`${field}: ${issue.message}`];
}
