/**
 * HAProxy in front of local brokers, on a variant of deploy/haproxy.cfg (see haproxy-config.ts)
 * written next to the run's logs: LB_BIND (which the file reads) and BROKER1…BROKERn come from the
 * environment, as compose sets them.
 */
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pollUntil } from "../core/clock.js";
import type { PlainChild, ProcessGroup, SpawnOptions } from "../core/process-group.js";
import { brokerEnv, haproxyVariant, type Balancing } from "./haproxy-config.js";
import { fetchStatus, unlessExited } from "./members.js";
import { PATHS } from "./repo-paths.js";
import { ensureProgram } from "./system-programs.js";

export interface LoadBalancer {
  /** The MCP endpoint through HAProxy. */
  readonly url: string;
  /** The config it runs (generated from deploy/haproxy.cfg). */
  readonly cfgFile: string;
  readonly child: PlainChild;
}

export interface LoadBalancerOptions extends SpawnOptions {
  /** `host:port` HAProxy binds (LB_BIND). */
  bind: string;
  /** `host:port` of each broker, in order (BROKER1…). */
  brokers: string[];
  balancing: Balancing;
  /** Name the answering server in this response header (diagnostics). */
  serverHeader?: string;
  /** Where the generated config goes. */
  dir: string;
  name?: string;
}

/** Writes the config variant, checks it with `haproxy -c`, starts HAProxy; resolves once /healthz answers 200 through it. */
export async function startLoadBalancer(group: ProcessGroup, options: LoadBalancerOptions, log: (message: string) => void): Promise<LoadBalancer> {
  const haproxy = ensureProgram("haproxy", "haproxy", log);
  const { bind, brokers, balancing, serverHeader, dir, name = "haproxy", ...spawn } = options;
  const cfgFile = join(dir, `${name}.cfg`);
  writeFileSync(cfgFile, haproxyVariant(readFileSync(PATHS.haproxyCfg, "utf8"), { brokers: brokers.length, balancing, ...(serverHeader !== undefined && { serverHeader }) }));
  const env: Record<string, string> = { ...spawn.env, LB_BIND: bind };
  brokers.forEach((address, i) => (env[brokerEnv(i + 1)] = address));
  const check = spawnSync(haproxy, ["-c", "-q", "-f", cfgFile], { env: { ...process.env, ...env }, encoding: "utf8" });
  if (check.status !== 0) throw new Error(`haproxy -c -f ${cfgFile} refused it: ${(check.stderr || check.stdout).trim()}`);
  const child = group.spawn(haproxy, ["-db", "-f", cfgFile], name, { ...spawn, env });
  const url = `http://${bind}/mcp`;
  try {
    await unlessExited(child, pollUntil(async () => (await fetchStatus(new URL("/healthz", url))) === 200, 20_000, `HAProxy on ${bind} to pass /healthz to a broker`, 100));
  } catch (error) {
    await child.stop();
    throw error;
  }
  return { url, cfgFile, child };
}
