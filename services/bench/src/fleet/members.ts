/**
 * The fleet's Node processes as deployed: the demo backend over HTTP, brokers
 * (`services/broker/dist/cli.js --config <file> --port <p>`) and workers
 * (`services/worker/dist/main.js --config <file> --port <p>`), each with REDIS_URL. Each is ready
 * when it says so on stderr (and, for a worker, its /readyz answers 200).
 */
import { pollUntil } from "../core/clock.js";
import type { PlainChild, ProcessGroup, SpawnOptions } from "../core/process-group.js";
import { PATHS } from "./repo-paths.js";

const BROKER_READY = /mcp-broker ready: (http:\/\/\S+)/;
const WORKER_RUNNING = /mcp-broker-worker running: .* on (http:\/\/\S+)/;
const DEMO_READY = /mcp-broker-demo ready: (http:\/\/\S+)/;
/** A broker waits up to 10 s for its backends, a worker's catalog may take a few more. */
const START_TIMEOUT_MS = 60_000;

/** A running process of the fleet and where it serves (a broker: its /mcp; a worker: its ops port; the demo: its /mcp). */
export interface Member {
  readonly tag: string;
  readonly url: string;
  readonly child: PlainChild;
}

export interface MemberOptions extends SpawnOptions {
  tag: string;
  configFile: string;
  port: number;
  redisUrl: string;
}

/** Rejects when `child` exits before `work` settles (its log says why). */
export async function unlessExited<T>(child: PlainChild, work: Promise<T>): Promise<T> {
  let exited: ((code: number | string) => void) | undefined;
  const gone = new Promise<never>((_, reject) => {
    exited = (code) => reject(new Error(`${child.name} exited (${code}) before it was ready: see its log`));
  });
  void child.exited.then((code) => exited?.(code));
  try {
    return await Promise.race([work, gone]);
  } finally {
    exited = undefined;
  }
}

async function started(child: PlainChild, pattern: RegExp, tag: string): Promise<Member> {
  try {
    const line = await child.waitForLine(pattern, START_TIMEOUT_MS);
    return { tag, url: pattern.exec(line)?.[1] ?? "", child };
  } catch (error) {
    await child.stop();
    throw error;
  }
}

/** The demo backend (services/broker/dist/demo/demo-backend.js --http) on 127.0.0.1:`port`. */
export function startDemoBackend(group: ProcessGroup, port: number, options: SpawnOptions = {}): Promise<Member> {
  const child = group.spawnNode(PATHS.demoBackend, ["--http", "--host", "127.0.0.1", "--port", String(port)], "demo", options);
  return started(child, DEMO_READY, "demo");
}

/** A broker on `configFile`, serving /mcp on 127.0.0.1:`port`. */
export function startBroker(group: ProcessGroup, options: MemberOptions): Promise<Member> {
  const { tag, configFile, port, redisUrl, ...spawn } = options;
  const child = group.spawnNode(PATHS.brokerCli, ["--config", configFile, "--port", String(port)], tag, { ...spawn, env: { ...spawn.env, REDIS_URL: redisUrl } });
  return started(child, BROKER_READY, tag);
}

/** A worker on `configFile`, its /healthz /readyz /metrics on 127.0.0.1:`port`; resolves once /readyz answers 200. */
export async function startWorker(group: ProcessGroup, options: MemberOptions): Promise<Member> {
  const { tag, configFile, port, redisUrl, ...spawn } = options;
  const child = group.spawnNode(PATHS.workerMain, ["--config", configFile, "--port", String(port)], tag, { ...spawn, env: { ...spawn.env, REDIS_URL: redisUrl } });
  const member = await started(child, WORKER_RUNNING, tag);
  try {
    await unlessExited(
      child,
      pollUntil(async () => (await fetchStatus(new URL("/readyz", member.url))) === 200, START_TIMEOUT_MS, `${tag} to be ready (${member.url}/readyz)`, 100),
    );
  } catch (error) {
    await child.stop();
    throw error;
  }
  return member;
}

/** The HTTP status of a GET (0 when it cannot be had), its body discarded. */
export async function fetchStatus(url: URL, timeoutMs = 2_000): Promise<number> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await response.body?.cancel();
    return response.status;
  } catch {
    return 0;
  }
}
