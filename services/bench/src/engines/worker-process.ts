/**
 * The worker (services/worker) as it is deployed: `node services/worker/dist/main.js --config <file>
 * --port 0` with REDIS_URL, its config file the brokers' (written next to its log). It is ready once
 * it says it runs and its own /readyz answers 200.
 */
import { existsSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { BrokerConfigInput } from "@mcp-broker/shared";
import { pollUntil } from "../core/clock.js";
import type { PlainChild, ProcessGroup } from "../core/process-group.js";

const WORKER_DIR = fileURLToPath(new URL("../../../worker/", import.meta.url));
const WORKER_SCRIPT = join(WORKER_DIR, "dist", "main.js");
const RUNNING = /mcp-broker-worker running: .* on (http:\/\/\S+)/;
const START_TIMEOUT_MS = 30_000;

/** A running worker: `opsUrl` serves /healthz, /readyz and /metrics. */
export interface WorkerProcess {
  readonly tag: string;
  readonly opsUrl: string;
  readonly child: PlainChild;
}

/**
 * Why the worker cannot be run from here, or undefined. The worker is not a dependency of this
 * package (so `npm run bench` does not build it): a missing or older-than-its-sources build is
 * refused rather than measured.
 */
export function workerProblem(): string | undefined {
  if (!existsSync(WORKER_SCRIPT)) return `the worker is not built (${WORKER_SCRIPT} missing): run npm run build`;
  const built = statSync(WORKER_SCRIPT).mtimeMs;
  const sources = join(WORKER_DIR, "src");
  const newest = Math.max(0, ...readdirSync(sources, { recursive: true, encoding: "utf8" }).map((file) => statSync(join(sources, file)).mtimeMs));
  return newest > built ? `the worker's build is older than its sources (${WORKER_SCRIPT}): run npm run build` : undefined;
}

/** Starts a worker on `config` (which must name the cluster's Redis and key prefix); resolves once it is ready. */
export async function startWorkerProcess(group: ProcessGroup, tag: string, config: BrokerConfigInput): Promise<WorkerProcess> {
  if (config.redisUrl === undefined) throw new Error("a worker needs redisUrl");
  const file = join(group.logDir, `worker-${tag}.config.json`);
  writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`);
  const child = group.spawnNode(WORKER_SCRIPT, ["--config", file, "--port", "0"], `worker-${tag}`, { env: { REDIS_URL: config.redisUrl } });
  try {
    const line = await child.waitForLine(RUNNING, START_TIMEOUT_MS);
    const opsUrl = RUNNING.exec(line)?.[1] ?? "";
    await pollUntil(
      async () => {
        const response = await fetch(new URL("/readyz", opsUrl)).catch(() => undefined);
        await response?.body?.cancel();
        return response?.ok === true;
      },
      START_TIMEOUT_MS,
      `worker ${tag} to be ready (${opsUrl}/readyz)`,
      50,
    );
    return { tag, opsUrl, child };
  } catch (error) {
    await child.stop();
    throw error;
  }
}

/** The sum of a counter's samples (every label set) on a member's /metrics; NaN when it cannot be read. */
export async function scrapeCounter(opsUrl: string, name: string): Promise<number> {
  try {
    const response = await fetch(new URL("/metrics", opsUrl));
    const text = await response.text();
    const samples = text.split("\n").filter((line) => line.startsWith(`${name} `) || line.startsWith(`${name}{`));
    return samples.length === 0 ? Number.NaN : samples.reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0);
  } catch {
    return Number.NaN;
  }
}
