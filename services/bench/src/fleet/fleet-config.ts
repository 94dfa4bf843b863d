/**
 * The compose fleet's member config (deploy/fleet.config.json) for processes on this machine: the
 * same file, with each backend URL that names a compose service (`http://demo:3100/mcp`) pointed
 * at where that service runs here (`http://127.0.0.1:3100/mcp`). Nothing else changes, so one file
 * drives both; the derived copy is written next to the run's logs.
 */
import { readFileSync } from "node:fs";

type Json = Record<string, unknown>;

/** Compose service name → `host:port` here. */
export type ServiceAddresses = Record<string, string>;

/**
 * `config` (a parsed fleet.config.json) with every backend `url` whose host is one of `services`
 * rewritten to that service's local address. Throws when a backend names a service not given (it
 * would be unreachable here).
 */
export function localFleetConfig(config: Json, services: ServiceAddresses): Json {
  const backends = Array.isArray(config.backends) ? (config.backends as unknown[]) : [];
  return {
    ...config,
    backends: backends.map((backend) => {
      if (typeof backend !== "object" || backend === null || typeof (backend as Json).url !== "string") return backend;
      const url = new URL((backend as Json).url as string);
      if (url.hostname === "127.0.0.1" || url.hostname === "localhost") return backend;
      const local = services[url.hostname];
      if (local === undefined) throw new Error(`backend ${String((backend as Json).id)}: ${url.href} names the compose service '${url.hostname}', which this fleet does not run`);
      const [host = "127.0.0.1", port = url.port] = local.split(":");
      url.hostname = host;
      url.port = port;
      return { ...(backend as Json), url: url.href };
    }),
  };
}

/** Reads a JSON config file (fleet.config.json is JSON). */
export function readJsonConfig(file: string): Json {
  const value: unknown = JSON.parse(readFileSync(file, "utf8"));
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new Error(`${file}: not a JSON object`);
  return value as Json;
}

/** The key prefix a config gives its cluster (the broker's default when it sets none). */
export function keyPrefixOf(config: Json): string {
  const redis = config.redis as Json | undefined;
  return typeof redis?.keyPrefix === "string" ? redis.keyPrefix : "mcp-broker:";
}
